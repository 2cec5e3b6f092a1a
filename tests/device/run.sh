#!/usr/bin/env bash
# Run on a lent GPU machine: every GPU check of gpubox, the most valuable
# first, from what tests/device/prepare.sh put in build/device-carry here. No
# compiler, no network, at most 8 minutes (GPUBOX_DEVICE_BUDGET_S, default
# 480). Each step has a cap in seconds (below); the caps add up to the 480 s
# budget. A step that would start with under 10 s left is reported as not run.
#
#   step                cap  what
#   setup                30  on cuda a usable CUDA first (else it fails at once,
#                            naming the driver's and torch's CUDA versions); the
#                            carry checked against its MANIFEST, pyzmq installed,
#                            the binaries under /opt/gpubox-device (setup.sh)
#   decode_profile       40  one decode step: ops, kernels and time per token
#   decode_8b           120  the headline: Llama 3 8B's shapes in bfloat16, modeld
#                            alone, loaded once: ms/token of dynamic, fixed and
#                            graph steps, graph = fixed tokens (pass/fail), the
#                            limit (bytes a step reads / gpu.probe's copy), each
#                            figure against its target (decode_bench.py)
#   compare_float32      30  modeld's logits and greedy tokens on cuda against
#   compare_bfloat16     30  transformers for every architecture (compare_hf.py)
#   transformers_8b      55  transformers eager's decode on the same 8B checkpoint
#                            (transformers_decode.py): the >= 4x target
#   model_bench          35  modeld against transformers on the 1 GB model: load,
#                            forward, generate (model_bench.py)
#   transformers_loader  30  the kernel's transformers and PEFT loader on cuda
#   local_sandbox_gpu    30  a local sandbox with --gpu: nvidia-smi and a torch
#                            matmul inside
#   hooks_bench          20  interventions against nnsight/TransformerLens where present
#   sae_bench            25  a top-64 capture of a 16k SAE in modeld on cuda against
#                            a plain forward, and against the capture encoded on
#                            the CPU as a caller would (sae_bench.py)
#   split_2gpu           35  on 2+ GPUs: a model split over cuda:0,1 (NCCL) against
#                            cuda:0 alone, float32 and bfloat16 logits and greedy
#                            tokens, what the split adds per layer, NCCL's
#                            all-reduce; on 1 GPU one line and "skipped"
#                            (split_check.py)
#
# The 35 s of split_2gpu came from steps whose caps look loosest against what they
# run (no GPU run has timed them yet; the CPU dry run's seconds beside the caps):
# model_bench 50 -> 35 (the 1 GB model, the least valuable figure: the 8B steps
# measure the headline), compare_* 35 -> 30 each, decode_profile 45 -> 40,
# hooks_bench 25 -> 20 (tests/device/README.md). A step exiting 77 where
# SKIPPABLE allows it (split_2gpu on one GPU) is recorded as "skipped".
#
# A failing step does not stop the others (only a failed setup does). Results,
# 3 files under $OUT (default build/device-results), rewritten after every
# step so that a run cut off at any moment returns what it measured:
# summary.txt (one line a step: result, seconds, key figures; the steps not
# reached yet are "not_run", one that cannot apply here "skipped"),
# summary.json (the same, and every figure), logs.tar.gz (each step's log and
# figure files).
#
#   tests/device/run.sh                 on the GPU machine
#   tests/device/run.sh --cpu-dry-run   every step on the CPU, small shapes (the
#                                       8B code path at 2 layers of width 512):
#                                       the rehearsal (tests/device/rehearse.sh)
# Environment: PYTHON (default python3: the machine's, with torch and
# transformers), GPUBOX_DEVICE_CARRY (default build/device-carry),
# GPUBOX_DEVICE_PREFIX (default /opt/gpubox-device), GPUBOX_DRY_RUN_CAP_SCALE
# (default 3: the dry run's caps and budget are this many times the GPU's).
# Exit 0: every step passed (or was skipped); 1: a step failed or did not run; 2: bad
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
# Each step's cap in seconds, in the order the steps run (the header says what each does).
STEPS="setup decode_profile decode_8b compare_float32 compare_bfloat16 transformers_8b model_bench transformers_loader
  local_sandbox_gpu hooks_bench sae_bench split_2gpu"
declare -A CAP=([setup]=30 [decode_profile]=40 [decode_8b]=120 [compare_float32]=30 [compare_bfloat16]=30
  [transformers_8b]=55 [model_bench]=35 [transformers_loader]=30 [local_sandbox_gpu]=30 [hooks_bench]=20 [sae_bench]=25
  [split_2gpu]=35)
# The steps whose exit 77 means "does not apply to this machine" (recorded as skipped, not failed).
declare -A SKIPPABLE=([split_2gpu]=1)
caps=0
for step in $STEPS; do caps=$((caps + CAP[$step])); done
((caps <= 480)) || { echo "run.sh: the steps' caps add up to $caps s, over the 480 s budget"; exit 2; }
# The CPU dry run checks that each step runs, not how fast: on a shared CPU
# (CI's two cores, busy with other tests) its caps and budget are scaled up.
if [[ $DRY_RUN == 1 ]]; then
  scale="${GPUBOX_DRY_RUN_CAP_SCALE:-3}"
  for step in $STEPS; do CAP[$step]=$((CAP[$step] * scale)); done
  BUDGET=$((BUDGET * scale))
  deadline=$((SECONDS + BUDGET))
fi

# report: summary.txt, summary.json and logs.tar.gz under RESULTS from the steps so far, each renamed into place.
report() {
  local elapsed status
  elapsed=$(awk -v a="$START" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  "$PYTHON" "$HERE/summarize.py" --steps "$WORK/steps.tsv" --figures "$WORK/figures" --mode "$DEVICE" \
    --seconds "$elapsed" --carry "$CARRY" --out "$RESULTS" --planned "$STEPS"
  status=$?
  tar -C "$WORK" -czf "$RESULTS/logs.tar.gz.partial" logs figures $([[ -f "$WORK/steps.tsv" ]] && echo steps.tsv) &&
    mv "$RESULTS/logs.tar.gz.partial" "$RESULTS/logs.tar.gz"
  return $status
}

# run_step NAME COMMAND...: runs COMMAND under NAME's cap with its output in logs/NAME.log, records
# NAME, its result (pass, fail, timeout, skipped, not_run), seconds and exit status, then rewrites the results.
run_step() {
  local name=$1 limit=${CAP[$1]}
  shift
  local left=$((deadline - SECONDS)) result rc began took
  if [[ $setup_ok == 0 ]]; then
    printf '%s\tnot_run\t0\t-\tsetup failed\n' "$name" >> "$WORK/steps.tsv"; report >/dev/null; return
  fi
  if ((left < 10)); then
    printf '%s\tnot_run\t0\t-\tout of time (budget %s s)\n' "$name" "$BUDGET" >> "$WORK/steps.tsv"; report >/dev/null; return
  fi
  ((limit > left)) && limit=$left
  echo "== $name (at most ${limit} s)"
  began=$(date +%s.%N)
  timeout --kill-after=5 "$limit" "$@" > "$WORK/logs/$name.log" 2>&1
  rc=$?
  took=$(awk -v a="$began" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  case $rc in
    0) result=pass ;;
    124|137) result=timeout ;;
    77) result=fail; [[ -n ${SKIPPABLE[$name]:-} ]] && result=skipped ;;
    *) result=fail ;;
  esac
  printf '%s\t%s\t%s\t%s\t\n' "$name" "$result" "$took" "$rc" >> "$WORK/steps.tsv"
  echo "   $result in ${took} s (exit $rc)"
  [[ $result == pass || $result == skipped ]] || tail -n 25 "$WORK/logs/$name.log" | sed 's/^/   | /'
  report >/dev/null
}

report >/dev/null  # every step "not reached": a run cut off before its first step ends still returns a summary
export CARRY PREFIX SITE="$WORK/site"
run_step setup "$HERE/setup.sh" "$DEVICE"
[[ $(cut -f2 "$WORK/steps.tsv") == pass ]] || setup_ok=0
export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
export GPUBOX="$PREFIX/bin/gpubox" GPUBOX_AGENT="$PREFIX/bin/gpubox-agent" GPUBOX_MODELD="$PREFIX/bin/gpubox-modeld"
DRY=()
[[ $DRY_RUN == 1 ]] && DRY=(--cpu-dry-run)

# The dry run checks that each step runs, on small shapes; the GPU run measures.
SHAPE_8B=(--arch llama8b)
DECODE_8B_ARGS=(--repeat 3 --new-tokens 64)
TRANSFORMERS_8B_ARGS=(--new-tokens 64)
COMPARE_MODELS=()
BENCH_ARGS=(--repeat 1)
HOOKS_ARGS=(--repeat 5)
PROFILE_ARGS=()
SAE_ARGS=(--repeat 7)
SPLIT_ARGS=()
if [[ $DRY_RUN == 1 ]]; then
  SHAPE_8B=(--arch llama8b --layers 2 --hidden-size 512)  # the 8B code path at a size the CPU runs
  DECODE_8B_ARGS=(--repeat 1 --new-tokens 8)
  TRANSFORMERS_8B_ARGS=(--new-tokens 8)
  COMPARE_MODELS=(--models gpt2,llama)
  BENCH_ARGS=(--layers 2 --repeat 1 --new-tokens 8)
  HOOKS_ARGS=(--layers 2 --repeat 1 --tokens 16 --long 64 --new-tokens 4)
  PROFILE_ARGS=(--layers 2 --steps 4)
  SAE_ARGS=(--repeat 1 --d-sae 1024 --tokens 32)
  SPLIT_ARGS=(--hidden 256 --depths 1,3 --new-tokens 8 --repeat 1 --allreduce-iterations 50)
fi
run_step decode_profile "$PYTHON" "$HERE/decode_profile.py" --device "$DEVICE" --dtype bfloat16 \
  --modeld "$GPUBOX_MODELD" --json "$WORK/figures/decode_profile.json" "${PROFILE_ARGS[@]}"
run_step decode_8b "$PYTHON" "$ROOT/tests/bench/decode_bench.py" --device "$DEVICE" --dtype bfloat16 \
  --modeld "$GPUBOX_MODELD" --json "$WORK/figures/decode_8b.json" "${SHAPE_8B[@]}" "${DECODE_8B_ARGS[@]}"
for dtype in float32 bfloat16; do
  run_step "compare_$dtype" "$PYTHON" "$ROOT/tests/model/modeld/compare_hf.py" --device "$DEVICE" --dtype "$dtype" \
    --modeld "$GPUBOX_MODELD" --json "$WORK/figures/compare_$dtype.json" "${COMPARE_MODELS[@]}"
done
run_step transformers_8b "$PYTHON" "$ROOT/tests/bench/transformers_decode.py" --device "$DEVICE" --dtype bfloat16 \
  --json "$WORK/figures/transformers_8b.json" "${SHAPE_8B[@]}" "${TRANSFORMERS_8B_ARGS[@]}"
run_step model_bench "$PYTHON" "$ROOT/tests/bench/model_bench.py" --device "$DEVICE" --dtype bfloat16 \
  --modeld "$GPUBOX_MODELD" --json "$WORK/figures/model_bench.json" "${BENCH_ARGS[@]}"
run_step transformers_loader "$HERE/check_transformers_loader.sh" "${DRY[@]}"
run_step local_sandbox_gpu "$HERE/check_local_gpu.sh" "${DRY[@]}"
run_step hooks_bench "$PYTHON" "$ROOT/tests/bench/hooks_bench.py" --device "$DEVICE" --dtype bfloat16 \
  --modeld "$GPUBOX_MODELD" --tokenizer "$CARRY/assets/gpt2-tokenizer.json" --json "$WORK/figures/hooks_bench.json" \
  "${HOOKS_ARGS[@]}"
run_step sae_bench "$PYTHON" "$ROOT/tests/bench/sae_bench.py" --device "$DEVICE" --modeld "$GPUBOX_MODELD" \
  --json "$WORK/figures/sae_bench.json" "${SAE_ARGS[@]}"
run_step split_2gpu "$PYTHON" "$HERE/split_check.py" --device "$DEVICE" --modeld "$GPUBOX_MODELD" \
  --json "$WORK/figures/split_2gpu.json" "${SPLIT_ARGS[@]}"

report
status=$?
cat "$RESULTS/summary.txt"
exit $status
