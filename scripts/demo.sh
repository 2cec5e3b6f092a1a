#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs the local demo,
# telling in plain words what happens.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/setup_python.sh   # torch's wheel (LibTorch for gpubox-modeld) and transformers, in build/venv
scripts/setup_npm.sh      # real tokenizer.json files
# Only what the demo runs (scripts/test.sh builds the tests too).
scripts/build.sh default gpubox gpubox-agent gpubox-modeld >/dev/null
scripts/install.sh    # gpubox on PATH (/usr/local/bin symlinks)
build/venv/bin/python scripts/demo_model.py build/demo/tiny-llama3 2>/dev/null
DEMO_MODEL=$(pwd)/build/demo/tiny-llama3 exec scripts/demo_sandbox.sh build/bin/gpubox
