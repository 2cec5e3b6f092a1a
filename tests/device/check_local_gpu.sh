#!/usr/bin/env bash
# Checks `gpubox create --gpu` on a GPU machine, where CI cannot: a local
# sandbox given the host's GPUs runs nvidia-smi and a torch CUDA matmul
# inside its own root, sees only the GPUs it was given, and finds the
# driver's files read-only. tests/device/run.sh runs it.
#
#   tests/device/check_local_gpu.sh                on a GPU machine
#   tests/device/check_local_gpu.sh --cpu-dry-run  without a GPU: a sandbox
#       runs the torch matmul on the CPU, and --gpu 0 is refused (exit 2)
#       because this host has no NVIDIA GPU
#
# Environment: GPUBOX, GPUBOX_AGENT (default build/bin/...), PYTHON (default
# python3: CUDA torch on the host's root file system, the sandbox's lower
# layer, outside /root, /home and /tmp, which a sandbox does not see).
# Needs root. Exit 0: every check passed; 1: a check failed; 77: no GPU here.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
GPUBOX="${GPUBOX:-$ROOT/build/bin/gpubox}"
export GPUBOX_AGENT="${GPUBOX_AGENT:-$ROOT/build/bin/gpubox-agent}"
PYTHON="$(command -v "${PYTHON:-python3}")"
DRY_RUN=0
[[ "${1:-}" == "--cpu-dry-run" ]] && DRY_RUN=1
STATE="$(mktemp -d /tmp/gpubox-gpu-check-XXXXXX)"
export XDG_STATE_HOME="$STATE"
# The sandboxes' store on a tmpfs of its own: their overlay's upper layer
# cannot sit on an overlayfs, which a container's or a VM's / (and /tmp) may be.
mount -t tmpfs -o mode=0700 gpubox-gpu-check "$STATE"
cleanup() {
  "$GPUBOX" terminate --all >/dev/null 2>&1 || true
  umount "$STATE" 2>/dev/null || true
  rm -rf "$STATE"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

if [[ $DRY_RUN == 0 ]] && { [[ ! -e /dev/nvidiactl ]] || ! command -v nvidia-smi >/dev/null; }; then
  echo "SKIP: no NVIDIA driver here (/dev/nvidiactl, nvidia-smi)"; exit 77
fi
[[ -x "$GPUBOX" && -x "$GPUBOX_AGENT" ]] || fail "missing $GPUBOX or $GPUBOX_AGENT (scripts/build.sh, or tests/device/prepare.sh)"

# The torch matmul a sandbox runs, on DEVICE, checked against float64 on the CPU.
matmul='
import sys, torch
device = sys.argv[1]
assert device == "cpu" or torch.cuda.is_available(), "torch.cuda.is_available() is False inside"
a = torch.randn(1024, 1024, device=device)
b = torch.randn(1024, 1024, device=device)
c = (a @ b).cpu()
ref = a.cpu().double() @ b.cpu().double()
err = (c.double() - ref).abs().max().item()
print("device", device, "cuda devices", torch.cuda.device_count(), "max error", err)
assert err < 1.0, err  # float32 (or TF32) sums of 1024 products of N(0,1) values: errors ~1e-3, never near 1
'

if [[ $DRY_RUN == 1 ]]; then
  echo "== create (no GPU: the dry run)"
  id=$("$GPUBOX" create --memory 4096) || fail "create"
  "$GPUBOX" exec "$id" -- "$PYTHON" -c "$matmul" cpu || fail "torch matmul inside"
  "$GPUBOX" terminate "$id" >/dev/null
  echo "== --gpu 0 on a host without a GPU is refused with exit 2"
  set +e
  "$GPUBOX" create --gpu 0 >/dev/null 2>"$STATE/err"; code=$?
  set -e
  [[ $code == 2 ]] && grep -q 'has no NVIDIA GPU' "$STATE/err" || fail "--gpu 0: exit $code, $(cat "$STATE/err")"
  echo "PASS (dry run)"
  exit 0
fi

host_count=$(nvidia-smi -L | grep -c '^GPU ')
echo "== host: $host_count GPU(s)"

echo "== create --gpu all"
id=$("$GPUBOX" create --gpu all --memory 65536) || fail "create --gpu all"
"$GPUBOX" info "$id" | grep -E '^(root|caps|gpus):'
inside=$("$GPUBOX" exec "$id" -- nvidia-smi -L) || fail "nvidia-smi inside: $inside"
echo "$inside"
[[ $(grep -c '^GPU ' <<<"$inside") == "$host_count" ]] || fail "nvidia-smi inside sees a different number of GPUs"
"$GPUBOX" exec "$id" -- sh -c 'echo x > "$(readlink -f "$(command -v nvidia-smi)")"' 2>/dev/null &&
  fail "the driver's nvidia-smi is writable inside"
echo "== torch CUDA matmul inside"
"$GPUBOX" exec "$id" -- "$PYTHON" -c "$matmul" cuda || fail "torch matmul inside"
"$GPUBOX" terminate "$id" >/dev/null

echo "== create --gpu 0: one GPU, numbered 0 inside"
id=$("$GPUBOX" create --gpu 0 --memory 65536) || fail "create --gpu 0"
env_line=$("$GPUBOX" exec "$id" -- sh -c 'echo $NVIDIA_VISIBLE_DEVICES/$CUDA_VISIBLE_DEVICES')
[[ "$env_line" == "0/0" ]] || fail "NVIDIA_VISIBLE_DEVICES/CUDA_VISIBLE_DEVICES inside: $env_line"
one=$("$GPUBOX" exec "$id" -- nvidia-smi -L | grep -c '^GPU ')
[[ "$one" == 1 ]] || fail "nvidia-smi inside --gpu 0 sees $one GPUs"
count=$("$GPUBOX" exec "$id" -- "$PYTHON" -c 'import torch; print(torch.cuda.device_count())')
[[ "$count" == 1 ]] || fail "torch inside --gpu 0 sees $count GPUs"
"$GPUBOX" terminate "$id" >/dev/null

echo "== --gpu $host_count (not on this host) is refused with exit 2"
set +e
"$GPUBOX" create --gpu "$host_count" >/dev/null 2>"$STATE/err"; code=$?
set -e
[[ $code == 2 ]] && grep -q 'is not on this host' "$STATE/err" || fail "--gpu $host_count: exit $code, $(cat "$STATE/err")"
echo "PASS"
