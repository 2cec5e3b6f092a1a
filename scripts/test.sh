#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test: the release build's
# suite, then the same suite under ASan+UBSan. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh default
ctest --preset default
scripts/build.sh asan
ctest --preset asan
