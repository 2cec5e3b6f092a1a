#!/usr/bin/env bash
# Checks gpubox-modeld on a GPU machine, where CI cannot (issue 15 item 9):
#   1. builds gpubox-modeld against this machine's PyTorch
#      (-DGPUBOX_TORCH_DIR=the `torch` package of $PYTHON), in $BUILD;
#   2. makes the tiny random models of every architecture and compares
#      modeld's logits on cuda, in float32 and in bfloat16, with transformers'
#      float32 forward of the same models on the CPU, and its greedy tokens
#      (tests/model/modeld/compare_hf.py: float32 within 1e-4 relative and
#      token-equal; bfloat16 within 2x transformers' own bf16 error + 1e-2,
#      the bound and its reason in that file);
#   3. calls gpu.info and gpu.probe;
#   4. runs the bench (tests/bench/model_bench.py) in bfloat16 on cuda;
#   5. runs the interventions bench (tests/bench/hooks_bench.py) in bfloat16
#      on cuda, beside nnsight and TransformerLens where $PYTHON has them.
# Results go under $OUT when set (else $BUILD/device-check): build.log,
# compare_*.{log,json}, gpu_info.json, gpu_probe.json, bench.{log,json},
# hooks_bench.log.
#
#   tests/device/check_modeld_gpu.sh               on a GPU machine
#   tests/device/check_modeld_gpu.sh --cpu-dry-run every step with device cpu
#       (gpu.info and gpu.probe must then answer that there is no GPU), to
#       test the script on a machine without one
#
# Environment: PYTHON (default python3; needs torch, transformers, pyzmq,
# msgpack), BUILD (default build/device-modeld), GPUBOX_MODELD (an existing
# binary: skips step 1), BENCH_ARGS (extra arguments of the bench, e.g.
# "--repeat 1 --new-tokens 16"; with --cpu-dry-run the default is a 2-layer
# model, one round of 8 new tokens), HOOKS_BENCH_ARGS (the same for step 5).
# Exit 0: every check passed; 1: a check failed; 77: no GPU here (and no
# --cpu-dry-run), which ctest shows as skipped.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
PYTHON="${PYTHON:-python3}"
BUILD="${BUILD:-$ROOT/build/device-modeld}"
DRY_RUN=0
[[ "${1:-}" == "--cpu-dry-run" ]] && DRY_RUN=1
fail() { echo "FAIL: $*"; exit 1; }
step() { echo; echo "== $*"; }

DEVICE=cuda
if [[ $DRY_RUN == 1 ]]; then
  DEVICE=cpu
  echo "-- --cpu-dry-run: every step with device cpu"
elif [[ ! -e /dev/nvidiactl ]] || ! "$PYTHON" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "NO GPU: /dev/nvidiactl is missing or $PYTHON's torch sees no CUDA device; this check needs one."
  echo "        (tests/device/check_modeld_gpu.sh --cpu-dry-run runs the same steps on the CPU)"
  exit 77
fi
RESULTS="${OUT:-$BUILD/device-check}"
mkdir -p "$RESULTS"
echo "-- results under $RESULTS"
"$PYTHON" -c 'import torch, transformers, zmq, msgpack' 2>/dev/null ||
  fail "$PYTHON lacks one of torch, transformers, pyzmq, msgpack"
"$PYTHON" -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)' |
  tee "$RESULTS/versions.txt"
[[ $DEVICE == cuda ]] && nvidia-smi -L | tee -a "$RESULTS/versions.txt"

step "1. build gpubox-modeld against this machine's PyTorch"
if [[ -n "${GPUBOX_MODELD:-}" ]]; then
  echo "using GPUBOX_MODELD=$GPUBOX_MODELD (no build)"
  MODELD="$GPUBOX_MODELD"
else
  for tool in cmake ninja c++; do command -v $tool >/dev/null || fail "$tool is not installed"; done
  TORCH_DIR="$("$PYTHON" -c 'import torch, os; print(os.path.dirname(torch.__file__))')"
  echo "GPUBOX_TORCH_DIR=$TORCH_DIR"
  JOBS="$(nproc)"
  { cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPUBOX_BUILD_TESTS=OFF \
      -DGPUBOX_TORCH_DIR="$TORCH_DIR" -DGPUBOX_DEPS_DIR="$ROOT/build/deps" &&
    cmake --build "$BUILD" --target gpubox-modeld -j "$JOBS"; } >"$RESULTS/build.log" 2>&1 ||
    { tail -30 "$RESULTS/build.log"; fail "the build failed (whole log: $RESULTS/build.log)"; }
  MODELD="$BUILD/bin/gpubox-modeld"
fi
[[ -x "$MODELD" ]] || fail "$MODELD is not an executable"

status=0
for dtype in float32 bfloat16; do
  step "2. logits and greedy tokens on $DEVICE in $dtype against transformers (float32, CPU)"
  if ! "$PYTHON" "$ROOT/tests/model/modeld/compare_hf.py" --device "$DEVICE" --dtype "$dtype" --modeld "$MODELD" \
      --json "$RESULTS/compare_$dtype.json" 2>&1 | tee "$RESULTS/compare_$dtype.log"; then
    echo "FAIL: the $dtype comparison"
    status=1
  fi
done

step "3. gpu.info and gpu.probe"
if ! ROOT_DIR="$ROOT" "$PYTHON" - "$MODELD" "$DEVICE" "$RESULTS" <<'EOF'
import json, os, subprocess, sys, tempfile, time
sys.path.insert(0, os.path.join(os.environ.get("ROOT_DIR", "."), "host", "python"))
from gpubox.client import Client, RpcError
modeld, device, results = sys.argv[1:4]
work = tempfile.mkdtemp()
endpoint = "ipc://" + os.path.join(work, "modeld.sock")
process = subprocess.Popen([modeld, "--endpoint", endpoint])
while not os.path.exists(endpoint[len("ipc://"):]):
    if process.poll() is not None:
        sys.exit("gpubox-modeld exited with status %d" % process.returncode)
    time.sleep(0.01)
client = Client(endpoint)
ok = True
try:
    for method in ("gpu.info", "gpu.probe"):
        try:
            answer = client.call(method, timeout=300)
        except RpcError as e:
            answer = {"error": {"code": e.code, "message": e.message}}
        with open(os.path.join(results, method.replace(".", "_") + ".json"), "w") as f:
            json.dump(answer, f, indent=1)
        print(method, json.dumps(answer, indent=1)[:3000])
        listed = answer.get("gpus" if method == "gpu.info" else "devices")
        if device == "cuda":  # each GPU listed; the probe measured something
            good = bool(listed) and (method == "gpu.info" or all(d.get("bf16_tflops", 0) > 0 for d in listed))
        else:  # no GPU here: a clear answer that there is none
            text = json.dumps(answer).lower()
            good = not listed and ("no nvidia gpu" in text or "cuda is unavailable" in text)
        print("%s: %s" % (method, "ok" if good else "UNEXPECTED"))
        ok &= good
finally:
    client.close()
    process.terminate()
    process.wait()
sys.exit(0 if ok else 1)
EOF
then
  echo "FAIL: gpu.info / gpu.probe"
  status=1
fi

step "4. the bench in bfloat16 on $DEVICE"
# The dry run's bench is a 2-layer model and one short round: it checks the steps, not the figures.
[[ $DRY_RUN == 1 ]] && BENCH_ARGS="${BENCH_ARGS:---layers 2 --repeat 1 --new-tokens 8}"
# shellcheck disable=SC2086
if ! "$PYTHON" "$ROOT/tests/bench/model_bench.py" --device "$DEVICE" --dtype bfloat16 --modeld "$MODELD" \
    --json "$RESULTS/bench.json" ${BENCH_ARGS:-} 2>&1 | tee "$RESULTS/bench.log"; then
  echo "FAIL: the bench"
  status=1
fi

step "5. the interventions bench in bfloat16 on $DEVICE"
[[ $DRY_RUN == 1 ]] && HOOKS_BENCH_ARGS="${HOOKS_BENCH_ARGS:---layers 2 --repeat 1 --tokens 16 --long 64 --new-tokens 4}"
# shellcheck disable=SC2086
if ! "$PYTHON" "$ROOT/tests/bench/hooks_bench.py" --device "$DEVICE" --dtype bfloat16 --modeld "$MODELD" \
    ${HOOKS_BENCH_ARGS:-} 2>&1 | tee "$RESULTS/hooks_bench.log"; then
  echo "FAIL: the interventions bench"
  status=1
fi

echo
[[ $status == 0 ]] && echo "check_modeld_gpu: every check passed ($DEVICE)" || echo "check_modeld_gpu: FAILED ($DEVICE)"
exit $status
