#!/usr/bin/env bash
# The Kubernetes backend against a real cluster (docs/kubernetes.md): the flow
# of tests/kubernetes/test_kubernetes_cli.py with the real CLI. create, exec
# (the agent is PID 1), run-code, a job and its result, terminate; then a check
# with the Kubernetes client that neither the Sandbox nor the Secret
# gpubox-ID is left. A trap terminates the sandbox if a step fails.
#
#   KUBECONFIG=PATH GPUBOX_K8S_IMAGE=REGISTRY/gpubox:TAG tests/kubernetes/check_real_cluster.sh
#
# KUBECONFIG: required (exit 77, a skip as ctest and scripts/test.sh count it,
# when it is unset or its file is missing); its current context is used.
# GPUBOX_K8S_IMAGE: the gpubox image, pushed where the cluster pulls from
# (required; exit 77 when unset). GPUBOX_K8S_NAMESPACE: the namespace
# (default "default"). GPUBOX_K8S_GPU: a number of GPUs to ask for (none by
# default). GPUBOX_CLI: the CLI (default build/bin/gpubox of this checkout).
# GPUBOX_PYTHON: a Python with gpubox's dependencies and `kubernetes` (default
# build/venv/bin/python). The host must reach pod IPs. Exit 0: every check
# passed; 1: one failed.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
me=check_real_cluster

if [ -z "${KUBECONFIG:-}" ]; then
  echo "$me: skipped (KUBECONFIG is not set)"
  exit 77
fi
IFS=: read -r -a kubeconfigs <<< "$KUBECONFIG"
for file in "${kubeconfigs[@]}"; do
  if [ -n "$file" ] && [ ! -f "$file" ]; then
    echo "$me: skipped (KUBECONFIG names $file, which does not exist)"
    exit 77
  fi
done
if [ -z "${GPUBOX_K8S_IMAGE:-}" ]; then
  echo "$me: skipped (GPUBOX_K8S_IMAGE is not set: the gpubox image, pushed where the cluster pulls from)"
  exit 77
fi
cli=${GPUBOX_CLI:-$root/build/bin/gpubox}
if [ ! -x "$cli" ]; then
  echo "$me: skipped (no gpubox CLI at $cli: build it, or set GPUBOX_CLI)"
  exit 77
fi
export GPUBOX_PYTHON=${GPUBOX_PYTHON:-$root/build/venv/bin/python}
namespace=${GPUBOX_K8S_NAMESPACE:-default}
image=$GPUBOX_K8S_IMAGE
gpu=${GPUBOX_K8S_GPU:-}

XDG_STATE_HOME=$(mktemp -d /tmp/gpubox-real-k8s-XXXXXX)
export XDG_STATE_HOME
id=""
cleanup() {
  if [ -n "$id" ]; then
    echo "$me: terminating $id after a failure"
    "$cli" terminate "$id" >/dev/null 2>&1 || true
  fi
  rm -rf "$XDG_STATE_HOME"
}
trap cleanup EXIT
fail() {
  echo "$me: FAILED: $*" >&2
  exit 1
}
json_field() {  # json_field KEY < JSON: the value of one key of a JSON object
  "$GPUBOX_PYTHON" -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]], end="")' "$1"
}

create_args=(--backend kubernetes --json --namespace "$namespace" --image "$image" --timeout 900)
if [ -n "$gpu" ]; then create_args+=(--gpu "$gpu"); fi
started=$SECONDS
created=$("$cli" create "${create_args[@]}") || fail "create --backend kubernetes ${create_args[*]}"
id=$(json_field id <<< "$created") || fail "create: no id in its output: $created"
echo "$me: create: $id in $((SECONDS - started)) s (namespace $namespace, image $image${gpu:+, $gpu GPU})"

comm=$("$cli" exec "$id" -- cat /proc/1/comm) || fail "exec"
[ "$comm" = gpubox-agent ] || fail "exec: PID 1 is '$comm', not gpubox-agent"
echo "$me: exec: PID 1 is gpubox-agent"

if [ -n "$gpu" ]; then
  gpus=$("$cli" exec "$id" -- nvidia-smi -L) || fail "exec nvidia-smi -L"
  count=$(grep -c '^GPU ' <<< "$gpus" || true)
  [ "$count" = "$gpu" ] || fail "nvidia-smi -L lists $count GPUs, not $gpu"
  echo "$me: gpu: nvidia-smi -L lists $count"
fi

cell=$("$cli" run-code "$id" 'print(6 * 7)' --json) || fail "run-code"
printed=$(json_field stdout <<< "$cell") || fail "run-code: no stdout in $cell"
[ "$printed" = 42 ] || fail "run-code: printed '$printed', not 42"
echo "$me: run-code: 6 * 7 = 42"

job=$("$cli" submit "$id" -- 'mkdir -p out && echo result > out/r.txt') || fail "submit"
"$cli" wait "$id" "$job" --timeout 120 >/dev/null || fail "wait $job"
"$cli" result "$id" "$job" --out "$XDG_STATE_HOME/result" >/dev/null || fail "result $job"
content=$(cat "$XDG_STATE_HOME/result/out/r.txt" 2>/dev/null) || fail "result: no out/r.txt"
[ "$content" = result ] || fail "result: out/r.txt holds '$content', not 'result'"
echo "$me: job: $job wrote out/r.txt, harvested"

started=$SECONDS
"$cli" terminate "$id" >/dev/null || fail "terminate $id"
terminated=$id
id=""
echo "$me: terminate: $terminated in $((SECONDS - started)) s"

# Nothing of the sandbox left: asked with the client, allowing 30 s for deletions to finish.
"$GPUBOX_PYTHON" - "$namespace" "gpubox-$terminated" <<'EOF' || fail "gpubox-$terminated is still in namespace $namespace"
import sys
import time

from kubernetes import client, config

namespace, name = sys.argv[1], sys.argv[2]
api = config.new_client_from_config()
core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)


def exists(read):
    try:
        read()
        return True
    except client.ApiException as e:
        if e.status == 404:
            return False
        raise


checks = {
    "Sandbox": lambda: custom.get_namespaced_custom_object("agents.x-k8s.io", "v1beta1", namespace, "sandboxes", name),
    "Secret": lambda: core.read_namespaced_secret(name, namespace),
}
give_up = time.monotonic() + 30
left = list(checks)
while left and time.monotonic() < give_up:
    left = [kind for kind in left if exists(checks[kind])]
    if left:
        time.sleep(1)
for kind in left:
    print("check_real_cluster: %s %s/%s is left" % (kind, namespace, name), file=sys.stderr)
sys.exit(1 if left else 0)
EOF
echo "$me: cleanup: no Sandbox and no Secret gpubox-$terminated in namespace $namespace"
echo "$me: ok"
