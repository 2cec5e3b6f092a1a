#!/usr/bin/env bash
# Builds the libFuzzer targets (preset "fuzz": clang, ASan + UBSan) and runs
# each for SECONDS (default 30), one after another. New inputs go to
# build/fuzz/corpus/<target> (tests/fuzz/corpus/<target> holds the checked-in
# seeds); a crash leaves its input in build/fuzz/artifacts/ and fails the script.
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#   scripts/fuzz.sh --list      the targets, one a line
set -euo pipefail
cd "$(dirname "$0")/.."
all_targets=(fuzz_header fuzz_body fuzz_frames fuzz_params fuzz_dispatch fuzz_extract fuzz_executor_frames fuzz_relay_frames
  fuzz_serve_wire fuzz_safetensors fuzz_tokenizer_json fuzz_chat_template fuzz_model_config fuzz_intervention_spec
  fuzz_mcp_messages fuzz_sae_config fuzz_budget_journal fuzz_budget_prices fuzz_admission)
if [ "${1:-}" = "--list" ]; then
  printf '%s\n' "${all_targets[@]}"
  exit 0
fi
seconds="${1:-30}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then targets=("${all_targets[@]}"); fi

cmake --preset fuzz >/dev/null
cmake --build --preset fuzz --target "${targets[@]}"

artifacts=build/fuzz/artifacts
mkdir -p "$artifacts"
failed=()
for target in "${targets[@]}"; do
  work=build/fuzz/corpus/$target
  mkdir -p "$work"
  max_len=4096
  case $target in
    fuzz_body) max_len=65536 ;;
    fuzz_dispatch) max_len=16384 ;;
    fuzz_extract) max_len=262144 ;;
    fuzz_executor_frames) max_len=60000 ;;
    fuzz_serve_wire) max_len=65536 ;;
    fuzz_safetensors) max_len=8192 ;;
    fuzz_tokenizer_json) max_len=16384 ;;
    fuzz_chat_template) max_len=16384 ;;
    fuzz_model_config) max_len=8192 ;;
    fuzz_intervention_spec) max_len=4096 ;;
    fuzz_mcp_messages) max_len=16384 ;;
    fuzz_sae_config) max_len=4096 ;;
  esac
  # A libFuzzer dictionary of the format's keywords, where the target has one.
  dict=()
  if [ -f "tests/fuzz/$target.dict" ]; then dict=(-dict="tests/fuzz/$target.dict"); fi
  echo "== $target: ${seconds}s"
  if ! build/fuzz/bin/"$target" "${dict[@]}" -max_total_time="$seconds" -max_len="$max_len" -timeout=30 -rss_limit_mb=4096 \
      -print_final_stats=1 -artifact_prefix="$artifacts/$target-" "$work" "tests/fuzz/corpus/$target" \
      >"build/fuzz/$target.log" 2>&1; then
    failed+=("$target")
    tail -n 60 "build/fuzz/$target.log"
  else
    grep -E "^(stat::number_of_executed_units|stat::new_units_added)|Done [0-9]+ runs" "build/fuzz/$target.log" || true
  fi
done
if [ ${#failed[@]} -ne 0 ]; then
  echo "fuzz: crashes in ${failed[*]} (inputs under $artifacts)" >&2
  exit 1
fi
echo "fuzz: no crash in ${targets[*]} after ${seconds}s each"
