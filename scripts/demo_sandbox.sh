#!/usr/bin/env bash
# Demo: a local sandbox through the gpubox CLI — create it, run commands in it,
# copy files in and out, look at it, run a batch job and harvest its outputs,
# run cells in its Jupyter kernel, serve a model from its native model host
# (interventions included), call functions served from it, and terminate it, saying what each step shows;
# then, when build/venv-inspect exists, an Inspect evaluation whose samples each get a sandbox.
# Usage: demo_sandbox.sh PATH/TO/gpubox   (gpubox-agent, and gpubox-modeld when
# DEMO_MODEL names a model directory, must sit beside it)
set -euo pipefail
gpubox=$(realpath "$1")
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/gpubox-demo.XXXXXX)
id=""
cleanup() {
  if [ -n "$id" ]; then "$gpubox" terminate "$id" >/dev/null 2>&1 || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
run() { printf '\033[2m$ %s\033[0m\n' "$*" >&2; "$@"; }

say "1. Create a sandbox: the agent becomes PID 1 of new PID, mount, UTS, IPC and network namespaces,"
echo "   with 1 GiB of memory, one CPU, no network but loopback, and a secret read from our environment."
export DEMO_TOKEN="tok-$RANDOM$RANDOM"   # a secret: it travels through a pipe, never argv, logs or state files
model_config=()
if [ -n "${DEMO_MODEL:-}" ]; then
  echo "   Its config names a model for the native model host (gpubox-modeld, LibTorch, no Python),"
  echo "   mounted read-only from this machine (the sandbox does not see /root, /home or our /tmp):"
  printf '{"model_host": {"models": [{"name": "tiny", "path": "/models/tiny"}]}}\n' > "$work/config.json"
  echo "   $(cat "$work/config.json")"
  model_config=(--config "$work/config.json" --mount "$DEMO_MODEL:/models/tiny:ro")
fi
id=$(run "$gpubox" create --name "demo-$$" --memory 1024 --cpu 1 --secret DEMO_TOKEN --env GREETING=hello "${model_config[@]}")
echo "   created sandbox $id; it runs on after 'create' returns:"
run "$gpubox" ls

say "2. Run commands: output streams back live; the exit code is the command's."
run "$gpubox" exec "$id" -- sh -c 'echo "$GREETING from $(hostname), in $(pwd), as PID $$ under PID 1 = $(cat /proc/1/comm)"'
run "$gpubox" exec "$id" -- sh -c 'echo "processes visible: $(ls /proc | grep -c "^[0-9]")"; echo "the secret is here: ${#DEMO_TOKEN} characters"'
set +e
run "$gpubox" exec "$id" -- sh -c 'echo "this goes to stdout"; echo "this goes to stderr" >&2; exit 3'
echo "   exit code: $?"
run "$gpubox" exec "$id" -- bash -c 'exec 3<>/dev/tcp/1.1.1.1/80' 2>&1 | sed 's/^/   /'
echo "   (no network: only loopback exists inside)"
set -e

say "3. Copy files in and out: streamed in 1 MiB chunks, sha256-checked at both ends."
head -c 3000000 /dev/urandom > "$work/data.bin"
mkdir -p "$work/project/src" && echo 'print("hi from the sandbox")' > "$work/project/src/main.py"
run "$gpubox" put "$id" "$work/data.bin" data.bin
run "$gpubox" put "$id" "$work/project" /workspace/
run "$gpubox" exec "$id" -- sh -c 'ls -R /workspace; sha256sum /workspace/data.bin; python3 /workspace/project/src/main.py > /workspace/out.txt'
run "$gpubox" get "$id" /workspace/out.txt "$work/out.txt"
echo "   got back: $(cat "$work/out.txt")"
run "$gpubox" get "$id" data.bin "$work/data.back"
cmp "$work/data.bin" "$work/data.back" && echo "   data.bin made the round trip unchanged"

say "4. Look at it: limits and how they are enforced (cgroup v2, v1 or rlimits), memory in use, the agent."
run "$gpubox" info "$id"
echo "   the memory limit is real: allocating 2 GiB in this 1 GiB sandbox is stopped, and said so"
set +e
run "$gpubox" exec "$id" -- python3 -c "b = b'x' * (2048 << 20)"
echo "   exit code: $?"
set -e
echo "   the agent's own log (last lines):"
"$gpubox" logs "$id" | tail -n 3 | cut -c1-150 | sed 's/^/   /'

say "5. A batch job and its harvest: the job runs on in the sandbox while we are away; whatever way it ends,"
echo "   what it wrote to out/ and its stdout/stderr logs are packed into one archive, ready to collect."
printf 'the quick brown fox\njumps over the lazy dog\n' > "$work/words.txt"
echo "   submit uploads words.txt (sha256-checked before the job starts) and names which outputs matter:"
job=$(run "$gpubox" submit "$id" --input "$work/words.txt" --output 'report.txt' --output 'scratch/*:hidden' \
        --intent "count words" -- 'sleep 1; mkdir -p out/scratch; wc -w < words.txt > out/report.txt; tr a-z A-Z < words.txt > out/scratch/upper.txt; echo "counted $(cat out/report.txt) words"')
echo "   the job's id is $job; the sandbox's jobs:"
run "$gpubox" jobs "$id"
echo "   wait blocks until the job ends and sums it up (exit code 0 only if it succeeded):"
run "$gpubox" wait "$id" "$job"
run "$gpubox" logs "$id" "$job"
echo "   result downloads the archive, checks every file against its sha256, and unpacks it safely:"
run "$gpubox" result "$id" "$job" --out "$work/harvest"
echo "   the report: $(cat "$work/harvest/out/report.txt") words; the hidden file came too: $(cat "$work/harvest/out/scratch/upper.txt" | head -n 1)"
echo "   a job that fails still delivers its logs and partial outputs; wait exits 1:"
job=$(run "$gpubox" submit "$id" -- 'echo "half done" > out/partial.txt; echo "out of patience" >&2; exit 4')
set +e
run "$gpubox" wait "$id" "$job"
echo "   exit code: $?"
set -e
run "$gpubox" result "$id" "$job" --out "$work/failed" >/dev/null
echo "   its stderr.log says: $(cat "$work/failed/stderr.log"); out/partial.txt says: $(cat "$work/failed/out/partial.txt")"

say "6. The kernel: a Jupyter kernel (IPython) runs in the sandbox; run-code sends it cells over the agent's RPC."
run "$gpubox" run-code "$id" 'import sys; print("Python", sys.version.split()[0], "in the sandbox"); counter = 1'
echo "   state is kept between cells, and a cell's last value is its result:"
run "$gpubox" run-code "$id" 'counter += 1; f"counter is now {counter}"'
echo "   a matplotlib plot is saved to a file here (--out-dir) and its path printed:"
run "$gpubox" run-code "$id" --out-dir "$work" 'import matplotlib.pyplot as plt
plt.plot([1, 4, 9, 16]); plt.title("squares"); plt.show()'
echo "   the saved plot: $(file -b "$work/output-1.png")"
echo "   a raised error prints its traceback and exits 1:"
set +e
run "$gpubox" run-code "$id" 'def ratio(a, b): return a / b
ratio(1, 0)'
echo "   exit code: $?"
echo "   a long cell interrupted with Ctrl-C (SIGINT) ends that cell only..."
"$gpubox" run-code "$id" 'import time; time.sleep(60)' 2>"$work/interrupted.txt" &
cell=$!
sleep 2; kill -INT "$cell"; wait "$cell"
echo "   exit code: $?; its traceback ends: $(grep -v '^$' "$work/interrupted.txt" | tail -n 1)"
set -e
echo "   ...and the next cell runs at once, with the state as it was:"
run "$gpubox" run-code "$id" 'counter * 21'
echo "   Jupyter frontends attach through the same authenticated endpoint; try, in another terminal:"
echo "     $gpubox attach $id          # prints a connection file and serves the kernel on it"
echo "     jupyter console --existing FILE   # FILE: the path attach printed"

if [ -n "${DEMO_MODEL:-}" ]; then
  say "7. A model: gpubox-modeld loaded it when the sandbox started (mmapped safetensors, checked before use)."
  echo "   (A tiny Llama 3 with random weights and Llama 3's real tokenizer: no weights can be downloaded here,"
  echo "   so what it writes is gibberish; the path is the same for a real checkpoint.)"
  run "$gpubox" model "$id" ls
  run "$gpubox" model "$id" info tiny
  run "$gpubox" model "$id" tokenize tiny "Hello, sandbox!"
  echo "   tokens stream back as they are generated (KV cache, greedy):"
  run "$gpubox" model "$id" generate tiny "Once upon a time" --max-new-tokens 16 --stream
  echo "   activations at TransformerLens-named hook points, written to a safetensors file:"
  run "$gpubox" model "$id" run tiny "Once upon a time" --capture blocks.1.hook_resid_post --capture blocks.0.attn.hook_pattern \
    --out "$work/acts.safetensors"
  echo "   the same model split over two ranks (tensor parallelism: on a machine with GPUs one rank per GPU;"
  echo "   here two CPU threads with Gloo between them), loaded while the sandbox runs: the same tokens:"
  run "$gpubox" model "$id" load tiny-split /models/tiny --device cpu --tensor-parallel 2 --allow-cpu-split --wait
  run "$gpubox" model "$id" generate tiny-split "Once upon a time" --max-new-tokens 16
  echo "   a model that is not there gets a clear error:"
  set +e
  run "$gpubox" model "$id" info no-such-model
  echo "   exit code: $?"
  set -e
fi

say "8. Functions served from the sandbox: interface.py runs in a supervised worker of the agent; local code"
echo "   calls it through a generated module with the real signatures, over the same authenticated endpoint."
cat > "$work/interface.py" <<'PY'
@expose
def word_count(text: str, *, lower: bool = True) -> dict:
    """How often each word occurs in text."""
    counts = {}
    for word in (text.lower() if lower else text).split():
        counts[word] = counts.get(word, 0) + 1
    return counts

@expose
def countdown(n: int):
    """Yields n, n-1, ..., 1 (a generator: its items stream)."""
    yield from range(n, 0, -1)
PY
PYTHONPATH="$root/python" run /usr/bin/python3 - "$id" "$work/interface.py" <<'PY'
import inspect, sys
import gpubox
from gpubox import served
lib = served.serve(gpubox.connect(sys.argv[1]), sys.argv[2], "tools")
print("   word_count%s -> %s" % (inspect.signature(lib.word_count), lib.word_count("the cat saw the Cat")))
print("   countdown(3) streams", list(lib.countdown(3)))
try:
    lib.word_count(42)
except gpubox.RemoteError as error:
    print("   a remote exception comes back typed:", error.type, "-", error.remote_message)
PY
echo "   AI agents get all of this as MCP tools: gpubox mcp --sandbox $id  (docs/mcp.md)"

say "9. Terminate: SIGTERM to the agent, a grace period, then its cgroups and state are removed."
run "$gpubox" terminate "$id"
id=""
run "$gpubox" ls

inspect_dir="$root/build/venv-inspect/bin"
if [ -x "$inspect_dir/inspect" ]; then
  say "10. An evaluation: Inspect runs 8 samples of an agent with bash() and python() tools (a scripted"
  echo "    mockllm model), each sample in a gpubox sandbox of its own, all at once (docs/inspect.md)."
  (cd "$root/tests/inspect" && GPUBOX_CLI="$gpubox" PYTHONPATH="$root/python" run "$inspect_dir/inspect" eval \
     tasks/gpubox_tools.py --model mockllm/model --sandbox gpubox --max-samples 8 --max-sandboxes 8 \
     -T samples=8 --display none --log-dir "$work/inspect-logs")
  "$inspect_dir/python" - "$work/inspect-logs" <<'PY'
import glob, sys
from inspect_ai.log import read_eval_log
log = read_eval_log(glob.glob(sys.argv[1] + "/*.eval")[0])
scores = "".join(str(s.scores["reversed_token"].value) for s in log.samples)
print("    the eval %s: %d samples scored %s (C: correct)" % (log.status, len(log.samples), scores))
PY
  echo "    Every sample's sandbox was ended with it:"
  run "$gpubox" ls
fi
