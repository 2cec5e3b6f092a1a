#!/usr/bin/env bash
# The GPU check's rehearsal, run here and in CI (ctest device_rehearsal), so
# that what is carried to a GPU machine cannot rot between the tasks that are
# lent one:
#   1. tests/device/prepare.sh makes the carry (into build/device-rehearsal/);
#   2. the working tree is copied as the device tool copies it (tracked and
#      untracked files that git does not ignore), with the carry at
#      build/device-carry;
#   3. in a podman container of localhost/gpubox-base-device:1 (a Python with
#      torch, transformers, peft, safetensors, numpy and msgpack, as the GPU
#      machine has; no compiler, no Debian dev packages, no network), this
#      script's --inside part checks the refusals of bad input (no GPU,
#      another torch, a missing carried file, CUDA unusable on cuda), that a
#      run cut off mid-step leaves its summary, then runs
#      tests/device/run.sh --cpu-dry-run;
#   4. what came back under OUT is checked as the device tool would return it:
#      at most 8 files, a summary with every step passed, in the order by
#      value, the 8B step having run the llama8b code path.
# The container is privileged: the dry run's local sandbox needs namespaces,
# mounts and cgroups, as on the GPU machine, where commands run as root.
#
#   tests/device/rehearse.sh        (scripts/setup_images.sh builds the image)
# Exit 0: rehearsed; 1: something the GPU machine would have met failed.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
IMAGE=localhost/gpubox-base-device:1
fail() { echo "rehearse.sh: FAIL: $*"; exit 1; }

if [[ "${1:-}" == "--inside" ]]; then
  # In the container, at the copied tree's root, as the GPU machine runs it.
  cd "$ROOT"
  echo "== without a GPU and without --cpu-dry-run: exit 77 and one line"
  set +e
  said=$(tests/device/run.sh 2>&1); code=$?
  set -e
  [[ $code == 77 && $(wc -l <<<"$said") == 1 && $said == *"no NVIDIA GPU"* ]] || fail "run.sh: exit $code: $said"
  echo "$said"

  echo "== a torch of another version is refused, naming both"
  fake=$(mktemp -d)
  echo "__version__ = '9.9.9+cu999'" > "$fake/version.py"
  set +e
  said=$(GPUBOX_TORCH_DIR=$fake build/device-carry/bin/gpubox-modeld --torch-version 2>&1); code=$?
  set -e
  built=$(cat build/device-carry/torch-version)
  [[ $code == 2 && $said == *"built against torch $built"* && $said == *"9.9.9"* ]] || fail "wrapper: exit $code: $said"
  echo "$said"

  echo "== a missing carried file is named"
  broken=$(mktemp -d)
  cp -a build/device-carry/. "$broken/"
  rm "$broken/bin/gpubox"
  set +e
  GPUBOX_DEVICE_CARRY=$broken OUT=$(mktemp -d) tests/device/run.sh --cpu-dry-run > "$broken.log" 2>&1; code=$?
  set -e
  [[ $code == 1 ]] && grep -q "missing carried file: $broken/bin/gpubox" "$broken.log" ||
    { cat "$broken.log"; fail "run.sh with bin/gpubox missing: exit $code"; }
  grep "missing carried file" "$broken.log"
  rm -rf "$fake" "$broken" "$broken.log"

  echo "== setup on cuda where CUDA is unusable fails at once, naming the driver's and torch's CUDA versions"
  set +e
  said=$(CARRY=build/device-carry PREFIX=$(mktemp -d) SITE=$(mktemp -d) PYTHON=python3 timeout 30 tests/device/setup.sh cuda 2>&1); code=$?
  set -e
  [[ $code == 1 && $said == *"CUDA is unusable here: torch.cuda.is_available() is False"* && $said == *"built for CUDA"* &&
     $said == *"NVIDIA driver is"* ]] || fail "setup.sh cuda without a GPU: exit $code: $said"
  tail -n1 <<<"$said"

  echo "== a run cut off mid-step still leaves its summary, the steps not reached named"
  cut=$(mktemp -d)
  OUT=$cut setsid tests/device/run.sh --cpu-dry-run > "$cut.log" 2>&1 &
  run=$!
  for _ in $(seq 1200); do  # up to 120 s for setup to pass (its dry-run cap is 90 s)
    grep -q '^setup  *pass' "$cut/summary.txt" 2>/dev/null && break
    sleep 0.1
  done
  # Every process of its session, the step's too (timeout puts a step in a process group of its own),
  # swept until none is left: a child forked while a sweep ran is not in that sweep's listing.
  for _ in $(seq 100); do
    left=0
    for proc in /proc/[0-9]*; do
      if [[ $(sed 's/^.*) //' "$proc/stat" 2>/dev/null | cut -d' ' -f4) == "$run" ]]; then
        kill -KILL "${proc#/proc/}" 2>/dev/null && left=1
      fi
    done
    ((left)) || break
    sleep 0.05
  done
  wait "$run" 2>/dev/null || true
  grep -q '^setup  *pass' "$cut/summary.txt" || { cat "$cut.log"; fail "no summary with setup passed before the cut"; }
  grep -q '^decode_profile .*not_run .*not reached' "$cut/summary.txt" &&
    grep -q '^sae_bench .*not_run .*not reached' "$cut/summary.txt" && [[ -f $cut/summary.json && -f $cut/logs.tar.gz ]] ||
    { cat "$cut/summary.txt"; fail "the summary left by a cut-off run does not name the steps it did not reach"; }
  tail -n1 "$cut/summary.txt"
  rm -rf "$cut" "$cut.log"

  echo "== the dry run"
  exec tests/device/run.sh --cpu-dry-run
fi

command -v podman >/dev/null && podman image exists "$IMAGE" || fail "$IMAGE is missing: run scripts/setup_images.sh"
git -C "$ROOT" rev-parse --git-dir >/dev/null 2>&1 || fail "$ROOT is not a git checkout: the device tool copies what git tracks"
stage="$ROOT/build/device-rehearsal"
rm -rf "$stage/tree" "$stage/out"
mkdir -p "$stage/tree" "$stage/out"
GPUBOX_DEVICE_CARRY="$stage/device-carry" "$ROOT/tests/device/prepare.sh"
# What the device tool sends: tracked files and untracked ones git does not ignore, plus the carry.
(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard |
  while IFS= read -r -d '' file; do [[ -e $file ]] && printf '%s\0' "$file"; done |
  tar --null -T - -cf -) | tar -C "$stage/tree" -xf -
mkdir -p "$stage/tree/build"
cp -a "$stage/device-carry" "$stage/tree/build/device-carry"
echo "rehearse.sh: the copied tree is $(du -sm "$stage/tree" | cut -f1) MiB (the device tool takes 64 MiB)"

set +e
podman run --rm --network none --privileged --cgroupns host -e OUT=/out \
  -v "$stage/tree:/work/repo" -v "$stage/out:/out" -w /work/repo "$IMAGE" tests/device/rehearse.sh --inside
code=$?
set -e
files=$(find "$stage/out" -type f | wc -l)
echo "rehearse.sh: $files files came back: $(cd "$stage/out" && find . -type f -printf '%P ' )"
((files <= 8)) || fail "$files files under OUT: the device tool returns 8"
[[ -f "$stage/out/summary.txt" && -f "$stage/out/summary.json" ]] || fail "no summary.txt and summary.json under OUT (exit $code)"
[[ $code == 0 ]] || fail "the dry run in the container exited $code"
python3 -c 'import json, sys
s = json.load(open(sys.argv[1]))
sys.exit(0 if s["failed"] == 0 and s["not_run"] == 0 and s["passed"] == len(s["steps"]) > 0 else 1)' "$stage/out/summary.json" ||
  fail "summary.json does not say every step passed"
# The order is by value: the decode profile and the 8B step first, and the 8B code path ran (small, on the CPU).
python3 -c 'import json, sys
s = json.load(open(sys.argv[1]))
order = [step["step"] for step in s["steps"]]
bench = s["figures"]["decode_8b"]
sys.exit(0 if order[:3] == ["setup", "decode_profile", "decode_8b"] and bench["model"].startswith("llama-8b")
         and bench["graph_equal"] and set(bench["ms"]) == {"dynamic", "fixed", "graph"} else "steps %s, decode_8b %s" % (
         order, {k: bench[k] for k in ("model", "graph_equal", "ms")}))' "$stage/out/summary.json" ||
  fail "summary.json: not the order by value, or decode_8b did not run the llama8b path"
echo "rehearse.sh: ok"
