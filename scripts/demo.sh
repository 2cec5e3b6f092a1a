#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs the local demo,
# telling in plain words what happens.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh default >/dev/null
scripts/install.sh    # gpubox on PATH (/usr/local/bin symlinks)
exec scripts/demo_sandbox.sh build/bin/gpubox
