#!/usr/bin/env bash
# Run on a lent GPU machine: every GPU check of gpubox, in order, from what
# tests/device/prepare.sh put in build/device-carry here. No compiler, no
# network, at most 8 minutes (GPUBOX_DEVICE_BUDGET_S, default 480): a step
# that would start with under 10 s left is reported as not run.
#
#   setup               the carry checked against its MANIFEST, pyzmq installed
#                       from its wheels, the binaries installed under
#                       /opt/gpubox-device (a local sandbox hides /root and
#                       /home and has its own /tmp, where the checkout may be)
#   compare_float32     modeld's logits and greedy tokens on cuda against
#   compare_bfloat16    transformers for every architecture (compare_hf.py)
#   gpu_info_probe      gpu.info and gpu.probe
#   local_sandbox_gpu   a local sandbox with --gpu: nvidia-smi and a torch matmul inside
#   transformers_loader the kernel's transformers and PEFT loader on cuda
#   model_bench         modeld against transformers, bfloat16 (model_bench.py)
#   hooks_bench         interventions against nnsight/TransformerLens where present
#   decode_profile      one decode step: ops, kernels and time per token
#   model_bench_8b      the model bench on Llama 3 8B's shapes, random bfloat16
#                       weights made on the GPU: decode with and without CUDA
#                       graphs, the bandwidth limit, load to first token
#   sae_bench           a top-64 capture of a 16k SAE in modeld on cuda against a
#                       plain forward, and against the capture encoded on the
#                       CPU as a caller would (sae_bench.py), GPT-2 small's shape
#
# A failing step does not stop the others (only a failed setup does). Results,
# 3 files under $OUT (default build/device-results): summary.txt (one line a
# step: result, seconds, key figures), summary.json (the same, and every
# figure), logs.tar.gz (each step's log and figure files).
#
#   tests/device/run.sh                 on the GPU machine
#   tests/device/run.sh --cpu-dry-run   every step on the CPU, small shapes:
#                                       the rehearsal (tests/device/rehearse.sh)
# Environment: PYTHON (default python3: the machine's, with torch and
# transformers), GPUBOX_DEVICE_CARRY (default build/device-carry),
# GPUBOX_DEVICE_PREFIX (default /opt/gpubox-device).
# Exit 0: every step passed; 1: a step failed or did not run; 2: bad
# arguments; 77: no GPU here and no --cpu-dry-run.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE="$ROOT/tests/device"
DRY_RUN=0
case "${1:-}" in
  "") ;;
  --cpu-dry-run) DRY_RUN=1 ;;
  *) echo "usage: tests/device/run.sh [--cpu-dry-run]" >&2; exit 2 ;;
esac
if [[ $DRY_RUN == 0 ]] && { [[ ! -e /dev/nvidiactl ]] || ! nvidia-smi -L >/dev/null 2>&1; }; then
  echo "run.sh: no NVIDIA GPU here (/dev/nvidiactl or a working nvidia-smi is missing); tests/device/run.sh --cpu-dry-run runs every step on the CPU"
  exit 77
fi

export PYTHON="${PYTHON:-python3}"
CARRY="${GPUBOX_DEVICE_CARRY:-$ROOT/build/device-carry}"
PREFIX="${GPUBOX_DEVICE_PREFIX:-/opt/gpubox-device}"
RESULTS="${OUT:-$ROOT/build/device-results}"
BUDGET="${GPUBOX_DEVICE_BUDGET_S:-480}"
WORK=$(mktemp -d /tmp/gpubox-device-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/logs" "$WORK/figures" "$RESULTS"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
export GPUBOX_DEVICE_PYTHON="$PYTHON"
DEVICE=cuda
[[ $DRY_RUN == 1 ]] && DEVICE=cpu
START=$(date +%s.%N)
deadline=$((SECONDS + BUDGET))
setup_ok=1

# run_step NAME LIMIT_S COMMAND...: runs COMMAND with its output in logs/NAME.log
# and records NAME, its result (pass, fail, timeout, not_run), seconds and exit status.
run_step() {
  local name=$1 limit=$2
  shift 2
  local left=$((deadline - SECONDS)) result rc began took
  if [[ $setup_ok == 0 ]]; then
    printf '%s\tnot_run\t0\t-\tsetup failed\n' "$name" >> "$WORK/steps.tsv"; return
  fi
  if ((left < 10)); then
    printf '%s\tnot_run\t0\t-\tout of time (budget %s s)\n' "$name" "$BUDGET" >> "$WORK/steps.tsv"; return
  fi
  ((limit > left)) && limit=$left
  echo "== $name (at most ${limit} s)"
  began=$(date +%s.%N)
  if declare -F "$1" >/dev/null; then  # a function of this script: setup, quick and local
    "$@" > "$WORK/logs/$name.log" 2>&1
  else
    timeout --kill-after=10 "$limit" "$@" > "$WORK/logs/$name.log" 2>&1
  fi
  rc=$?
  took=$(awk -v a="$began" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  case $rc in
    0) result=pass ;;
    124|137) result=timeout ;;
    *) result=fail ;;
  esac
  printf '%s\t%s\t%s\t%s\t\n' "$name" "$result" "$took" "$rc" >> "$WORK/steps.tsv"
  echo "   $result in ${took} s (exit $rc)"
  [[ $result == pass ]] || tail -n 25 "$WORK/logs/$name.log" | sed 's/^/   | /'
}

# The carry: every file of its MANIFEST present and intact, then installed.
setup() {
  [[ -f "$CARRY/MANIFEST" ]] || { echo "missing carried file: $CARRY/MANIFEST (run tests/device/prepare.sh here, and carry build/device-carry)"; return 1; }
  local missing=0 hash path
  while read -r hash path; do
    [[ -f "$CARRY/$path" ]] || { echo "missing carried file: $CARRY/$path"; missing=1; }
  done < "$CARRY/MANIFEST"
  [[ $missing == 0 ]] || { echo "(run tests/device/prepare.sh here, and carry build/device-carry)"; return 1; }
  (cd "$CARRY" && sha256sum --quiet -c MANIFEST) || { echo "a carried file differs from its MANIFEST: prepare again"; return 1; }
  "$PYTHON" -c 'import torch, transformers, safetensors, numpy, msgpack' ||
    { echo "$PYTHON lacks one of torch, transformers, safetensors, numpy, msgpack (the GPU machine has them)"; return 1; }
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --disable-pip-version-check \
    --find-links "$CARRY/wheels" --target "$WORK/site" pyzmq || { echo "no carried pyzmq wheel fits $PYTHON"; return 1; }
  rm -rf "$PREFIX" && mkdir -p "$PREFIX/lib" &&
    cp -a "$CARRY/bin" "$CARRY/libexec" "$CARRY/torch-version" "$PREFIX/" &&
    { [[ ! -d "$CARRY/lib" ]] || cp -a "$CARRY/lib/." "$PREFIX/lib/"; } || { echo "cannot install into $PREFIX"; return 1; }
  "$PREFIX/bin/gpubox-modeld" --torch-version || return 1
  "$PYTHON" -c 'import torch, transformers, sys; print("python", sys.version.split()[0], "torch", torch.__version__,
    "cuda", torch.version.cuda, "available", torch.cuda.is_available(), "transformers", transformers.__version__)'
  [[ $DEVICE == cpu ]] || nvidia-smi -L
}
run_step setup 120 setup
[[ $(cut -f2 "$WORK/steps.tsv") == pass ]] || setup_ok=0
export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
export GPUBOX="$PREFIX/bin/gpubox" GPUBOX_AGENT="$PREFIX/bin/gpubox-agent" GPUBOX_MODELD="$PREFIX/bin/gpubox-modeld"
DRY=()
[[ $DRY_RUN == 1 ]] && DRY=(--cpu-dry-run)

# The dry run checks that each step runs, on small shapes; the GPU run measures.
COMPARE_MODELS=()
BENCH_ARGS=(--repeat 2)
BENCH_8B_ARGS=(--arch llama8b --repeat 1 --new-tokens 32)
HOOKS_ARGS=(--repeat 5)
PROFILE_ARGS=()
SAE_ARGS=(--repeat 7)
if [[ $DRY_RUN == 1 ]]; then
  COMPARE_MODELS=(--models gpt2,llama)
  BENCH_ARGS=(--layers 2 --repeat 1 --new-tokens 8)
  BENCH_8B_ARGS=(--layers 2 --repeat 1 --new-tokens 8)  # the rehearsal: the small shape
  HOOKS_ARGS=(--layers 2 --repeat 1 --tokens 16 --long 64 --new-tokens 4)
  PROFILE_ARGS=(--layers 2 --steps 4)
  SAE_ARGS=(--repeat 1 --d-sae 1024 --tokens 32)
fi
for dtype in float32 bfloat16; do
  run_step "compare_$dtype" 90 "$PYTHON" "$ROOT/tests/model/modeld/compare_hf.py" --device "$DEVICE" --dtype "$dtype" \
    --modeld "$GPUBOX_MODELD" --json "$WORK/figures/compare_$dtype.json" "${COMPARE_MODELS[@]}"
done
run_step gpu_info_probe 120 "$PYTHON" "$HERE/gpu_info_probe.py" --device "$DEVICE" --modeld "$GPUBOX_MODELD" \
  --json "$WORK/figures/gpu_info_probe.json"
run_step local_sandbox_gpu 90 "$HERE/check_local_gpu.sh" "${DRY[@]}"
run_step transformers_loader 90 "$HERE/check_transformers_loader.sh" "${DRY[@]}"
run_step model_bench 180 "$PYTHON" "$ROOT/tests/bench/model_bench.py" --device "$DEVICE" --dtype bfloat16 \
  --modeld "$GPUBOX_MODELD" --json "$WORK/figures/model_bench.json" "${BENCH_ARGS[@]}"
run_step hooks_bench 120 "$PYTHON" "$ROOT/tests/bench/hooks_bench.py" --device "$DEVICE" --dtype bfloat16 \
  --modeld "$GPUBOX_MODELD" --tokenizer "$CARRY/assets/gpt2-tokenizer.json" --json "$WORK/figures/hooks_bench.json" \
  "${HOOKS_ARGS[@]}"
run_step decode_profile 90 "$PYTHON" "$HERE/decode_profile.py" --device "$DEVICE" --dtype bfloat16 \
  --modeld "$GPUBOX_MODELD" --json "$WORK/figures/decode_profile.json" "${PROFILE_ARGS[@]}"
run_step model_bench_8b 240 "$PYTHON" "$ROOT/tests/bench/model_bench.py" --device "$DEVICE" --dtype bfloat16 \
  --modeld "$GPUBOX_MODELD" --json "$WORK/figures/model_bench_8b.json" "${BENCH_8B_ARGS[@]}"
run_step sae_bench 90 "$PYTHON" "$ROOT/tests/bench/sae_bench.py" --device "$DEVICE" --modeld "$GPUBOX_MODELD" \
  --json "$WORK/figures/sae_bench.json" "${SAE_ARGS[@]}"

elapsed=$(awk -v a="$START" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
"$PYTHON" "$HERE/summarize.py" --steps "$WORK/steps.tsv" --figures "$WORK/figures" --mode "$DEVICE" \
  --seconds "$elapsed" --carry "$CARRY" --out "$RESULTS"
status=$?
tar -C "$WORK" -czf "$RESULTS/logs.tar.gz" logs figures steps.tsv
cat "$RESULTS/summary.txt"
exit $status
