#!/usr/bin/env bash
# Checks the transformers loader of kernel.models (kernel/model_loader.py) on a
# GPU machine, where CI cannot: Debian bookworm has no python3-transformers.
# tests/device/run.sh runs it; with --cpu-dry-run every check runs with
# device cpu and bfloat16 instead of cuda and float16.
# Needs a python3 with torch (CUDA), transformers and tokenizers installed
# (pip install transformers peft); peft is optional (the adapter check is
# skipped without it). Nothing is downloaded: a tiny GPT-2 and a word-level
# tokenizer are made here at random.
#
#   tests/device/check_transformers_loader.sh            # loader alone, then through the agent
#   tests/device/check_transformers_loader.sh --cpu-dry-run
#   PYTHON=/opt/venv/bin/python3 GPUBOX_AGENT=build/bin/gpubox-agent tests/device/check_transformers_loader.sh
#
# Stage 1 runs the loader in-process; stage 2 starts the real gpubox-agent
# (GPUBOX_AGENT, else build/bin/gpubox-agent)
# with the models in its config and checks them through kernel.execute and
# kernel.info. Exit 0: every check passed; 1: a check failed; 77: skipped
# (no transformers or no GPU).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
PYTHON="${PYTHON:-python3}"
DEVICE=cuda DTYPE=float16
[[ "${1:-}" == "--cpu-dry-run" ]] && DEVICE=cpu DTYPE=bfloat16
export DEVICE DTYPE
WORK="$(mktemp -d /tmp/gpubox-transformers-XXXXXX)"
AGENT_PID=""
cleanup() {
  if [[ -n "$AGENT_PID" ]]; then kill "$AGENT_PID" 2>/dev/null || true; wait "$AGENT_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

if ! "$PYTHON" -c "import torch, transformers, tokenizers" 2>/dev/null; then
  echo "SKIP: $PYTHON lacks torch, transformers or tokenizers (pip install transformers)"; exit 77
fi
if [[ $DEVICE == cuda ]] && ! "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "SKIP: torch.cuda.is_available() is False on this machine"; exit 77
fi
HAVE_PEFT=0
"$PYTHON" -c "import peft" 2>/dev/null && HAVE_PEFT=1

echo "== making a tiny GPT-2, its tokenizer and (with peft) a LoRA adapter in $WORK"
"$PYTHON" - "$WORK" "$HAVE_PEFT" <<'PY'
import os, sys
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast
work, have_peft = sys.argv[1], sys.argv[2] == "1"
words = ["<unk>", "<eos>", "hello", "world", "gpu", "box"]
tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.Whitespace()
fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>")
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(vocab_size=len(words), n_positions=32, n_embd=32, n_layer=2, n_head=2))
base = os.path.join(work, "tiny-gpt2")
model.save_pretrained(base)
fast.save_pretrained(base)
if have_peft:
    from peft import LoraConfig, get_peft_model
    adapter = get_peft_model(model, LoraConfig(r=2, target_modules=["c_attn"], task_type="CAUSAL_LM"))
    adapter.save_pretrained(os.path.join(work, "tiny-adapter"))  # no tokenizer: the base's is used
PY

echo "== stage 1: the loader in-process"
"$PYTHON" - "$ROOT" "$WORK" "$HAVE_PEFT" <<'PY'
import os, sys
root, work, have_peft = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
device, dtype = os.environ["DEVICE"], os.environ["DTYPE"]
sys.path.insert(0, os.path.join(root, "kernel"))
import torch
import model_loader
failures = []
def check(label, condition, detail=""):
    print(("ok   " if condition else "FAIL ") + label + (": " + str(detail) if detail and not condition else ""))
    if not condition:
        failures.append(label)
def entry(**kw):
    e = {"var_name": "model", "tokenizer_var": "tok", "loader": "transformers", "device": device, "dtype": dtype,
         "hidden": False, "is_peft": False, "path": os.path.join(work, "tiny-gpt2"), "base_model": "", "name": "tiny"}
    e.update(kw)
    return e
item, values = model_loader.load_one(entry())
check("causal LM loads", item["status"] == "loaded", item)
if item["status"] == "loaded":
    model, tok = values["model"], values["tok"]
    check("on " + device, next(model.parameters()).device.type == device, item["device"])
    check(dtype, next(model.parameters()).dtype == getattr(torch, dtype), item["dtype"])
    check("eval mode", not model.training)
    check("type reported", item["type"] == "GPT2LMHeadModel", item["type"])
    check("parameters reported", item["parameters"] == sum(p.numel() for p in model.parameters()), item["parameters"])
    ids = tok("hello gpu box", return_tensors="pt").input_ids.to(device)
    check("tokenizer", ids.tolist() == [[2, 4, 5]], ids.tolist())
    with torch.no_grad():
        logits = model(ids).logits
    check("forward on " + device, tuple(logits.shape) == (1, 3, 6) and logits.device.type == device, tuple(logits.shape))
item, _ = model_loader.load_one(entry(device="cuda:99"))
check("a missing GPU index is a clear failure", item["status"] == "failed" and "cuda:99" in item["error"], item)
item, _ = model_loader.load_one(entry(path=os.path.join(work, "missing")))
check("a missing model dir is reported", item["status"] == "failed" and item["error"], item)
if have_peft:
    item, values = model_loader.load_one(entry(is_peft=True, path=os.path.join(work, "tiny-adapter"),
                                               base_model=os.path.join(work, "tiny-gpt2")))
    check("peft adapter on its base", item["status"] == "loaded" and item["type"] == "PeftModelForCausalLM", item)
    if item["status"] == "loaded":
        # The adapter ships no tokenizer: the base's word-level one encodes these words as their ids.
        encoded = values["tok"]("hello gpu box").input_ids if values["tok"] is not None else None
        check("peft: the base's tokenizer", encoded == [2, 4, 5], encoded)
else:
    print("skip peft (not installed)")
text = model_loader.format_model_info([model_loader.load_one(entry(hidden=True, name=None))[0]])
check("hidden: no name or path in model_info", "tiny" not in text and work not in text, text)
sys.exit(1 if failures else 0)
PY

echo "== stage 2: through the real agent"
AGENT="${GPUBOX_AGENT:-$ROOT/build/bin/gpubox-agent}"
[[ -x "$AGENT" ]] || { echo "FAIL: $AGENT is missing (scripts/build.sh, or tests/device/prepare.sh)"; exit 1; }
MODELS="[{\"name\": \"tiny\", \"path\": \"$WORK/tiny-gpt2\", \"loader\": \"transformers\", \"device\": \"$DEVICE\", \"dtype\": \"$DTYPE\", \"tokenizer_var\": \"tokenizer\"}"
if [[ "$HAVE_PEFT" == 1 ]]; then
  MODELS+=", {\"name\": \"adapter\", \"path\": \"$WORK/tiny-adapter\", \"loader\": \"transformers\", \"var_name\": \"tuned\", \"is_peft\": true, \"base_model\": \"$WORK/tiny-gpt2\", \"device\": \"$DEVICE\"}"
fi
MODELS+="]"
cat > "$WORK/config.json" <<JSON
{"state_dir": "$WORK/state", "kernel": {"python": "$(command -v "$PYTHON")", "models": $MODELS}}
JSON
# The RPC client side needs pyzmq and msgpack, in the kernel's Python or in Debian's.
CLIENT_PYTHON=""
for candidate in "$PYTHON" /usr/bin/python3; do
  if "$candidate" -c "import zmq, msgpack" 2>/dev/null; then CLIENT_PYTHON="$candidate"; break; fi
done
if [[ -z "$CLIENT_PYTHON" ]]; then
  echo "FAIL: stage 2 needs pyzmq and msgpack in $PYTHON or /usr/bin/python3"; exit 1
fi
"$AGENT" --config "$WORK/config.json" --log-level warn >"$WORK/agent.out" 2>"$WORK/agent.err" &
AGENT_PID=$!
"$CLIENT_PYTHON" - "$ROOT" "$WORK" "$HAVE_PEFT" <<'PY'
import json, os, sys, time
root, work, have_peft = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
sys.path.insert(0, os.path.join(root, "python"))
import gpubox
deadline = time.monotonic() + 30
while not os.path.exists(os.path.join(work, "state", "rpc.sock")):
    if time.monotonic() > deadline:
        sys.exit("FAIL the agent did not start: " + open(os.path.join(work, "agent.err")).read())
    time.sleep(0.1)
client = gpubox.Client("ipc://%s/state/rpc.sock" % work)
out = []
with client.stream("kernel.execute", code="import torch\n"
                   "ids = tokenizer('hello world', return_tensors='pt').input_ids.to(model.device)\n"
                   "print(model.device, model.dtype, tuple(model(ids).logits.shape))\n"
                   "print(model_info)") as stream:
    for chunk in stream:
        out.append(chunk.body.get("text", ""))
    result = stream.result
text = "".join(out)
print(text)
failures = []
if result["status"] != "ok": failures.append("cell failed: %r" % result)
expected_first = "%s torch.%s (1, 2, 6)" % ("cuda:0" if os.environ["DEVICE"] == "cuda" else "cpu", os.environ["DTYPE"])
if not text.startswith(expected_first): failures.append("model on %s in %s" % (os.environ["DEVICE"], os.environ["DTYPE"]))
info = client.call("kernel.info")
statuses = [(m["var_name"], m["status"]) for m in info["models"]]
print(statuses)
expected = [("model", "loaded")] + ([("tuned", "loaded")] if have_peft else [])
if statuses != expected: failures.append("kernel.info statuses %r != %r" % (statuses, expected))
client.call("kernel.restart")
with client.stream("kernel.execute", code="print(type(model).__name__, tokenizer('hello gpu box').input_ids)") as stream:
    again = "".join(c.body.get("text", "") for c in stream)
if again != "GPT2LMHeadModel [2, 4, 5]\n": failures.append("after a restart: %r" % again)
client.close()
for f in failures: print("FAIL " + f)
sys.exit(1 if failures else 0)
PY
echo "PASS: the transformers loader works on $DEVICE"
