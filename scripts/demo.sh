#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs the local demo,
# telling in plain words what happens. Prints each phase's time at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/phases.sh
phase setup scripts/setup.sh
phase setup_python scripts/setup_python.sh venv venv-inspect   # torch's wheel (LibTorch for gpubox-modeld) and transformers, in build/venv; inspect_ai in build/venv-inspect
phase setup_npm scripts/setup_npm.sh         # real tokenizer.json files
# Only what the demo runs (scripts/test.sh builds the tests too).
build_demo() { scripts/build.sh default gpubox gpubox-agent gpubox-modeld >/dev/null; }
phase build build_demo
phase install scripts/install.sh             # gpubox on PATH (/usr/local/bin symlinks)
make_demo_model() { build/venv/bin/python scripts/demo_model.py build/demo/tiny-llama3 2>/dev/null; }
phase "demo model" make_demo_model
export DEMO_MODEL=$(pwd)/build/demo/tiny-llama3
phase demo scripts/demo_sandbox.sh build/bin/gpubox
print_phases
