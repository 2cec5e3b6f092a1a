# Sourced by scripts/demo.sh and scripts/test.sh: `phase NAME COMMAND...` runs
# COMMAND, prints its wall time as "<script>: N s NAME", and `print_phases`
# prints every phase's time again at the end.
phase_times=()
phase() {  # $1: the phase's name; the rest: its command
  local name=$1 start=$SECONDS
  shift
  "$@"
  phase_times+=("$(printf '%5d s  %s' $((SECONDS - start)) "$name")")
  echo "$(basename "$0"): ${phase_times[-1]}"
}
print_phases() {
  printf '%s: phase times\n' "$(basename "$0")"
  printf '  %s\n' "${phase_times[@]}"
  echo "$(basename "$0"): all phases took $SECONDS s"
}
