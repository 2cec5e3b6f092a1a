#!/usr/bin/env bash
# image/Dockerfile's source stages for real, outside CI (tens of minutes on two
# cores): AGENT_FROM=source and MODELD_FROM=source compile the agent and
# gpubox-modeld in a container from this checkout, with the project's own
# scripts/setup.sh on the local minbase (standing in for debian:bookworm) and
# PyPI's torch of the base's version from the wheelhouse, on the torch
# stand-in base with PYTHON_SETUP=pip; then the image runs and its agent and
# model host answer. Needs scripts/setup_images.sh first. Prints the build's
# wall time; exits non-zero on any failure.
#   tests/image/check_source_build.sh [TAG]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
tag=${1:-localhost/gpubox-source-check:latest}
wheelhouse=${GPUBOX_WHEELHOUSE:-/var/cache/gpubox/wheels}
start=$(date +%s)
podman build --isolation chroot -f "$root/image/Dockerfile" \
  --build-arg BUILD_BASE=localhost/gpubox-base-minbase:bookworm-1 \
  --build-arg BASE=localhost/gpubox-base-torch:bookworm-1 \
  --build-arg AGENT_FROM=source --build-arg MODELD_FROM=source --build-arg PYTHON_SETUP=pip \
  --build-arg "PIP_OPTIONS=--no-index --find-links /wheels" --volume "$wheelhouse:/wheels:ro" \
  -t "$tag" "$root"
echo "check_source_build: built $tag in $(( $(date +%s) - start )) s"
# Run it as a sandbox: the agent as PID 1, its model host on the image's libtorch.
cli=${GPUBOX_CLI:-$root/build/bin/gpubox}
fixture=${GPUBOX_MODEL_FIXTURE:-$root/build/tests/model_client_fixture}
[ -f "$fixture/refs.json" ] || "$root/build/venv/bin/python" "$root/tests/python_models/make_fixture.py" "$fixture" >/dev/null
export XDG_STATE_HOME=$(mktemp -d /tmp/gpubox-source-check-XXXXXX)
trap 'rm -rf "$XDG_STATE_HOME"' EXIT
echo '{"model_host": {"models": [{"name": "tiny", "path": "/models/tiny"}]}}' > "$XDG_STATE_HOME/config.json"
id=$("$cli" create --backend podman --image "$tag" --config "$XDG_STATE_HOME/config.json" --mount "$fixture/llama:/models/tiny:ro")
trap '"$cli" terminate "$id" >/dev/null; rm -rf "$XDG_STATE_HOME"' EXIT
test "$("$cli" exec "$id" -- readlink /proc/1/exe)" = /usr/local/bin/gpubox-agent
"$cli" exec "$id" -- /usr/local/bin/gpubox-modeld --torch-version
"$cli" model "$id" generate tiny --ids 1,72,101 --max-new-tokens 4 --ignore-eos --json
"$cli" run-code "$id" 'import torch; print("kernel torch", torch.__version__)'
echo "check_source_build: ok"
