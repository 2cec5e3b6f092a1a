#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test: the release build's
# suite (unit, integration with the agent as PID 1, RPC, Python client, and
# the container tests: image/Dockerfile built and run with podman on the local
# bases of setup_images.sh; gpubox-modeld against transformers and the
# tokenizer against Hugging Face's tokenizers, from build/venv and
# tests/assets; the Inspect provider against inspect_ai, from
# build/venv-inspect; the Kubernetes backend against a real kube-apiserver
# that scripts/setup_kubernetes.sh builds), the suite under ASan+UBSan (without the container
# tests, gpubox-modeld and the suites labelled release_only: docs/build.md
# says why),
# then a short run of every libFuzzer target. Prints each phase's time.
# Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each phase's wall time, printed as it ends and again at the end (CI's budget is 45 minutes).
source scripts/lib/phases.sh

phase setup scripts/setup.sh
phase setup_python scripts/setup_python.sh
phase setup_npm scripts/setup_npm.sh
phase setup_images scripts/setup_images.sh
phase setup_kubernetes scripts/setup_kubernetes.sh
# Run by hand or by CI alike, what the setup just installed must be there.
source scripts/lib/strict_prerequisites.sh

# What did not run, and why. A missing prerequisite that the setup installs
# fails its test (strict_prerequisites.sh sets CI=true for the builds and tests
# below); what remains skipped is what this machine cannot have: a GPU, a Modal token.
report_skips() {  # $1: the preset's build dir, $2: ctest's console output
  local tests python
  tests=$(grep -E '\*\*\*Skipped' "$2" | sed -E 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+).*/\1/' | sort -u || true)
  python=$(grep -hE "\.\.\. skipped ['\"]" "$1/Testing/Temporary/LastTest.log" | sed -E "s/^(test_[^ ]+).* skipped ['\"](.*)['\"]$/\1: \2/" || true)
  echo "skipped in $1: $(printf '%s' "$tests" | grep -c . || true) ctest tests, $(printf '%s' "$python" | grep -c . || true) Python test methods"
  if [ -n "$tests" ]; then printf '  %s\n' $tests; fi
  if [ -n "$python" ]; then printf '%s\n' "$python" | sed 's/^/  /'; fi
}

run_ctest() {  # $1: the preset; its console output goes to $2 too
  ctest --preset "$1" 2>&1 | tee "$2"
}
phase "build default" scripts/build.sh default
phase "ctest default" run_ctest default build/ctest-default.out
phase "build asan" scripts/build.sh asan
phase "ctest asan" run_ctest asan build/asan/ctest-asan.out
phase fuzz scripts/fuzz.sh "${GPUBOX_FUZZ_SECONDS:-10}"
report_skips build build/ctest-default.out
report_skips build/asan build/asan/ctest-asan.out
print_phases
