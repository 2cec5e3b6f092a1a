#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test: the release build's
# suite (unit, integration with the agent as PID 1, RPC, Python client, and
# the container tests: image/Dockerfile built and run with podman on the local
# bases of setup_images.sh; gpubox-modeld against transformers and the
# tokenizer against Hugging Face's tokenizers, from build/venv and
# tests/assets), the same suite under ASan+UBSan (without the container tests:
# a sanitized agent is not static; without gpubox-modeld: LibTorch is not
# instrumented), then a short run of every libFuzzer target.
# Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/setup_python.sh
scripts/setup_npm.sh
scripts/setup_images.sh
scripts/build.sh default
ctest --preset default
scripts/build.sh asan
ctest --preset asan
scripts/fuzz.sh "${GPUBOX_FUZZ_SECONDS:-20}"
