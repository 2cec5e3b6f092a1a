#!/usr/bin/env bash
# The Modal backend against a real Modal account: create (CPU, then a GPU
# when GPUBOX_MODAL_GPU is set, e.g. T4 or H100), exec, run-code, a job with
# its result, snapshot and a sandbox restored from it, terminate. Skips (exit 77, as ctest and scripts/test.sh count a skip) unless MODAL_TOKEN_ID is set. It costs
# a few cents of Modal time; every sandbox it starts is terminated on exit.
#
#   MODAL_TOKEN_ID=... MODAL_TOKEN_SECRET=... tests/modal/check_real_modal.sh [build/bin/gpubox]
#
# GPUBOX_PYTHON: a Python with `modal` and gpubox's dependencies (default
# build/venv/bin/python); GPUBOX_MODAL_IMAGE: the image (default: the
# backend's CUDA + PyTorch image); GPUBOX_MODAL_APP: the app (gpubox-check).
# Not run from this repository's machines (they cannot reach Modal).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
if [ -z "${MODAL_TOKEN_ID:-}" ]; then
  echo "check_real_modal: skipped (MODAL_TOKEN_ID is not set)"
  exit 77
fi
cli=${1:-$root/build/bin/gpubox}
export GPUBOX_PYTHON=${GPUBOX_PYTHON:-$root/build/venv/bin/python}
export XDG_STATE_HOME=$(mktemp -d /tmp/gpubox-real-modal-XXXXXX)
app=${GPUBOX_MODAL_APP:-gpubox-check}
image_args=()
[ -n "${GPUBOX_MODAL_IMAGE:-}" ] && image_args=(--image "$GPUBOX_MODAL_IMAGE")
created=()
cleanup() {
  for id in "${created[@]}"; do "$cli" terminate "$id" >/dev/null 2>&1 || true; done
  rm -rf "$XDG_STATE_HOME"
}
trap cleanup EXIT
fail() { echo "check_real_modal: FAILED: $*" >&2; exit 1; }
now() { date +%s.%N; }

check() {  # check LABEL CREATE-ARGS...
  local label=$1; shift
  local t0 id t1
  t0=$(now)
  id=$("$cli" create --backend modal --app "$app" --timeout 900 "${image_args[@]}" "$@") || fail "$label: create"
  created+=("$id")
  t1=$(now)
  echo "check_real_modal: $label: created $id in $(echo "$t1 - $t0" | bc) s"
  "$cli" info "$id" | sed 's/^/  /'
  [ "$("$cli" exec "$id" -- cat /proc/1/comm)" = gpubox-agent ] || fail "$label: the agent is not PID 1"
  [ "$("$cli" exec "$id" -- sh -c 'echo $((6*7))')" = 42 ] || fail "$label: exec"
  "$cli" --json run-code "$id" 'print(6 * 7)' | grep -q '"stdout":"42\\n"' || fail "$label: run-code"
  local job out
  job=$("$cli" submit "$id" -- 'mkdir -p out && echo harvested > out/r.txt')
  "$cli" wait "$id" "$job" --timeout 120 >/dev/null || fail "$label: job"
  out=$(mktemp -d)/result
  "$cli" result "$id" "$job" --out "$out" >/dev/null || fail "$label: result"
  [ "$(cat "$out/out/r.txt")" = harvested ] || fail "$label: the job's output"
  "$cli" exec "$id" -- sh -c 'echo snapshotted > /workspace/kept.txt' || fail "$label: write a file"
  "$cli" snapshot "$id" --name "check-$label-$$" >/dev/null || fail "$label: snapshot"
  local restored
  restored=$("$cli" create --from-snapshot "check-$label-$$" 2>/dev/null) || fail "$label: create --from-snapshot"
  created+=("$restored")
  [ "$("$cli" exec "$restored" -- cat /workspace/kept.txt)" = snapshotted ] || fail "$label: the snapshot's file"
  "$cli" terminate "$restored" >/dev/null || fail "$label: terminate the restored sandbox"
  "$cli" snapshots rm "check-$label-$$" >/dev/null || true
  if [ -n "${GPUBOX_MODAL_GPU:-}" ] && [ "$label" = gpu ]; then
    "$cli" exec "$id" -- nvidia-smi -L || fail "gpu: nvidia-smi"
  fi
  t0=$(now)
  "$cli" terminate "$id" >/dev/null || fail "$label: terminate"
  echo "check_real_modal: $label: terminated in $(echo "$(now) - $t0" | bc) s"
}

check cpu --cpu 1 --memory 1024
[ -n "${GPUBOX_MODAL_GPU:-}" ] && check gpu --gpu "$GPUBOX_MODAL_GPU"
echo "check_real_modal: ok"
