#!/usr/bin/env bash
# A long fuzzing campaign, outside CI: HOURS (default 1) split evenly over the
# libFuzzer targets (scripts/fuzz.sh --list, or those named), one after
# another, each growing its corpus in build/fuzz/corpus/<target>, which is
# kept for the next campaign. Writes build/fuzz/campaign-DATE.md: per target
# its seconds, runs, inputs added, corpus size, crashes and slow units
# (inputs under build/fuzz/artifacts). Exits 1 when any target crashed.
#   scripts/fuzz_campaign.sh [HOURS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
hours="${1:-1}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then mapfile -t targets < <(scripts/fuzz.sh --list); fi
seconds=$(python3 -c "import sys; print(max(1, int(float(sys.argv[1]) * 3600 / int(sys.argv[2]))))" "$hours" "${#targets[@]}")

status=0
scripts/fuzz.sh "$seconds" "${targets[@]}" || status=$?

report="build/fuzz/campaign-$(date -u +%Y%m%dT%H%MZ).md"
stat() { grep -m1 "^stat::$1:" "$2" | awk '{print $2}' || true; }
{
  echo "# Fuzz campaign $(date -u +%Y-%m-%d), ${hours} h: ${seconds} s per target"
  echo
  echo "| target | seconds | runs | inputs added | corpus | crashes | slow units |"
  echo "| --- | --- | --- | --- | --- | --- | --- |"
  for target in "${targets[@]}"; do
    log="build/fuzz/$target.log"
    # libFuzzer's artifacts: crash-, leak-, oom- and timeout- are findings; slow-unit- is an input that took long.
    crashes=$(find build/fuzz/artifacts -name "$target-*" ! -name "$target-slow-unit-*" 2>/dev/null | wc -l)
    slow=$(find build/fuzz/artifacts -name "$target-slow-unit-*" 2>/dev/null | wc -l)
    corpus=$(find "build/fuzz/corpus/$target" -type f 2>/dev/null | wc -l)
    echo "| $target | $seconds | $(stat number_of_executed_units "$log") | $(stat new_units_added "$log") | $corpus | $crashes | $slow |"
  done
} > "$report"
cat "$report"
echo "report: $report"
exit "$status"
