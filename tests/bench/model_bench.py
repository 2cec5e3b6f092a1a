#!/usr/bin/env python3
"""Model bench: gpubox-modeld beside Hugging Face transformers' eager mode on
the same random Llama-architecture checkpoint (about 1 GB in float32, made once
with transformers and cached; --arch gpt2: GPT-2 small's shapes), figures side by side from one run, with the
ratio. Each round is repeated --repeat times; the table shows the median and,
in brackets, the spread (min-max) as the noise.

  load to first logits (page cache warm for all three: the files are read once
  before the first round):
    modeld        process start (Popen) -> modeld.status says ready -> the
                  answer of a first model.forward (8 tokens) received
    transformers  a fresh `python -c`: interpreter start, `import torch,
                  transformers` (imports counted), from_pretrained, one
                  forward of the same 8 tokens, until it prints "done"
    modeld, run-time load  the same modeld process, the model unloaded after
                  the rest of its round: model.load -> ready -> the answer of a
                  first model.forward (8 tokens): the load a running sandbox
                  does, without the process start and LibTorch's own loading
    cat           `cat model files > /dev/null`
  forward tok/s   a 128-token prompt, logits of every position (both),
                  modeld through model.forward (RPC and the float32 logits'
                  transfer counted) vs model(ids) in this process
  generate tok/s  new tokens / wall time of one call (prefill included): a
                  16-token prompt, --new-tokens new tokens with EOS ignored,
                  greedy, batch 1 and 8; modeld's model.generate vs
                  model.generate(do_sample=False) (transformers' eager
                  attention, its default DynamicCache)
  decode ms/token batch-1 time per new token without the prefill: (the time
                  of a 64-token generate - that of a 1-token one) / 63, for
                  modeld (dynamic steps, and graph: a CUDA graph per step on a
                  GPU, the same static-shape step run eagerly elsewhere) and
                  for transformers, measured the same way
  the limit       the bytes a decode step reads (every weight once, one row
                  of an untied embedding table: decode_limit.py) / memory
                  bandwidth, measured in the same run:
                  on a GPU a device-to-device copy of 1 GiB (read + write
                  bytes / time), on the CPU a read (sum) of the model's own
                  weights with the same threads; the fraction of it modeld's
                  decode reaches
  ops per layer   `gpubox-modeld --profile-decode` (LibTorch's profiler): the
                  LibTorch ops per layer per decode step that do work (not
                  views), inside the decoder's layer scope, and the device
                  kernels per step on a GPU
  RSS             modeld's VmRSS (/proc/PID/status) once ready and after the
                  bench, against the bytes of the weight files

Threads: modeld uses LibTorch's default intra-op thread count (the
machine's cores); this process sets torch.set_num_threads to the same.

--arch llama8b: Llama 3 8B's shapes (8.0 B parameters, 16 GB in bfloat16),
random weights written straight to safetensors on the fly (nothing is
downloaded); for a GPU. With --layers and --hidden-size, the same code path
at a size the CPU runs (the device check's rehearsal). The device check's
8B figures come from decode_bench.py, which runs modeld alone.

usage: build/venv/bin/python tests/bench/model_bench.py [--repeat 3] [--arch llama|gpt2|llama8b]
         [--layers N] [--hidden-size H] [--device cpu|cuda] [--dtype float32|bfloat16] [--json FILE]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "model", "modeld"))

import torch  # noqa: E402
import transformers as tf  # noqa: E402
from modeld_process import connect_when_bound as connect  # noqa: E402

import decode_limit  # noqa: E402  (beside this file)

# About 254 M parameters: 1.02 GB in float32.
CONFIG = dict(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=16,
              num_attention_heads=16, num_key_value_heads=8, max_position_embeddings=2048,
              bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
# --arch gpt2: GPT-2 small's shapes (124 M parameters, 0.5 GB in float32; Conv1D weights, tied head).
GPT2_CONFIG = dict(vocab_size=50257, n_embd=768, n_layer=12, n_head=12, n_positions=1024,
                   bos_token_id=50256, eos_token_id=50256)
# --arch llama8b: Llama 3 8B's shapes.
LLAMA8B_CONFIG = dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192,
                      rope_theta=500000.0, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
FIRST_IDS = [1, 306, 4658, 278, 6593, 310, 2834, 338]


def llama8b_config(layers=None, hidden=None):
    """Llama 3 8B's shapes, or for a rehearsal on the CPU the same code path smaller: fewer layers, and a
    narrower width that keeps the head size (128), 4 query heads per KV head and the MLP's 3.5x ratio."""
    config = dict(LLAMA8B_CONFIG, num_hidden_layers=layers or LLAMA8B_CONFIG["num_hidden_layers"])
    if hidden and hidden != config["hidden_size"]:
        if hidden % 512:
            raise ValueError("--hidden-size %d: the llama8b shape narrows in steps of 512 (4 heads of 128)" % hidden)
        config.update(hidden_size=hidden, intermediate_size=hidden * 7 // 2, num_attention_heads=hidden // 128,
                      num_key_value_heads=hidden // 512)
    return config


def write_random_llama(directory, config, dtype=torch.bfloat16):
    """A random Llama checkpoint written tensor by tensor (no model object: 16 GB
    would not be built twice in memory), made on the GPU when there is one."""
    import safetensors.torch
    device = "cuda" if torch.cuda.is_available() else "cpu"
    cfg = tf.LlamaConfig(**config)
    cfg.torch_dtype = "bfloat16"
    partial = fresh_partial(directory)
    cfg.save_pretrained(partial)
    h, inner, layers = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    head_dim = h // cfg.num_attention_heads
    kv = cfg.num_key_value_heads * head_dim
    generator = torch.Generator(device=device).manual_seed(0)

    def rand(*shape, norm=False):
        t = torch.randn(*shape, generator=generator, device=device, dtype=torch.float32)
        return (1.0 + 0.1 * t if norm else 0.02 * t).to(dtype).cpu()

    shard = {"model.embed_tokens.weight": rand(cfg.vocab_size, h), "model.norm.weight": rand(h, norm=True),
             "lm_head.weight": rand(cfg.vocab_size, h)}
    index, number = {}, 0

    def flush():
        nonlocal shard, number
        name = "model-%05d.safetensors" % number
        safetensors.torch.save_file(shard, os.path.join(partial, name), metadata={"format": "pt"})
        index.update({key: name for key in shard})
        shard, number = {}, number + 1

    flush()
    for i in range(layers):
        p = "model.layers.%d." % i
        shard.update({p + "input_layernorm.weight": rand(h, norm=True), p + "post_attention_layernorm.weight": rand(h, norm=True),
                      p + "self_attn.q_proj.weight": rand(h, h), p + "self_attn.k_proj.weight": rand(kv, h),
                      p + "self_attn.v_proj.weight": rand(kv, h), p + "self_attn.o_proj.weight": rand(h, h),
                      p + "mlp.gate_proj.weight": rand(inner, h), p + "mlp.up_proj.weight": rand(inner, h),
                      p + "mlp.down_proj.weight": rand(h, inner)})
        flush()
    with open(os.path.join(partial, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": index}, f)
    os.replace(partial, directory)


def make_model(directory, arch, layers, hidden=None):
    """The cached checkpoint (random weights, save_pretrained); made on first use. layers: the llama
    shapes' (None: the arch's own); hidden: llama8b's width (llama8b_config)."""
    if os.path.exists(os.path.join(directory, "config.json")):
        return directory
    if arch == "llama8b":
        write_random_llama(directory, llama8b_config(layers, hidden))
        return directory
    torch.manual_seed(0)
    if arch == "gpt2":
        model = tf.GPT2LMHeadModel(tf.GPT2Config(**GPT2_CONFIG)).eval()
    else:
        model = tf.LlamaForCausalLM(tf.LlamaConfig(**dict(CONFIG, num_hidden_layers=layers or CONFIG["num_hidden_layers"]))).eval()
    return save_random(model, directory)


def default_model_dir(arch, layers=None, hidden=None):
    """build/bench-models/NAME, NAME saying the shape: llama-1gb, llama-4l, gpt2-small, llama-8b, llama-8b-2l-512h."""
    if arch == "gpt2":
        name = "gpt2-small"
    elif arch == "llama8b":
        name = "llama-8b" + ("-%dl" % layers if layers else "") + ("-%dh" % hidden if hidden else "")
    else:
        name = "llama-1gb" if layers in (None, CONFIG["num_hidden_layers"]) else "llama-%dl" % layers
    return os.path.join(ROOT, "build", "bench-models", name)


def fresh_partial(directory):
    """An empty DIRECTORY.partial to write into: what a run killed while writing left there is removed
    first (transformers' save_pretrained trips over a half-written shard of another run)."""
    partial = directory + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    os.makedirs(partial)
    return partial


def save_random(model, directory):
    """Saves model to directory (written beside it, then renamed) with random norms too,
    so that nothing is an identity by accident."""
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
    partial = fresh_partial(directory)
    model.save_pretrained(partial)
    os.replace(partial, directory)
    return directory


def weight_files(directory):
    return sorted(os.path.join(directory, f) for f in os.listdir(directory) if f.endswith(".safetensors"))


def vm_rss(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def cpu_and_faults(pid):
    """(user + system CPU seconds, minor page faults) of a process so far."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), int(fields[7])


class Modeld:
    """A gpubox-modeld process serving one model, and a client to it."""

    def __init__(self, binary, model_dir, device, dtype, workdir):
        self.endpoint = "ipc://" + os.path.join(workdir, "modeld-%d.sock" % time.monotonic_ns())
        config = os.path.join(workdir, "modeld.json")
        with open(config, "w") as f:
            json.dump({"models": [{"name": "bench", "path": model_dir, "dtype": dtype, "device": device}]}, f)
        self.client = None
        self.start = time.perf_counter()
        self.process = subprocess.Popen([binary, "--endpoint", self.endpoint, "--config", config],
                                        stderr=subprocess.DEVNULL)

    def wait_ready(self):
        self.client = connect(self.endpoint, self.process)
        self.listening = time.perf_counter() - self.start
        self.wait_loaded()

    def wait_loaded(self):
        while True:
            try:
                status = self.client.call("modeld.status", timeout=5)
            except Exception:  # not listening yet
                time.sleep(0.002)
                continue
            model = status["models"][0]
            if model["state"] == "ready":
                return
            if model["state"] == "failed":
                raise RuntimeError("modeld failed to load: %s" % model.get("error"))
            time.sleep(0.002)

    def reload(self, model_dir, device, dtype):
        """model.unload, then model.load of the same checkpoint (returns at once; loads in the background)."""
        self.client.call("model.unload", model="bench")
        self.client.call("model.load", name="bench", path=model_dir, device=device, dtype=dtype)

    def forward(self, ids, last_only=False):
        result = self.client.call("model.forward", timeout=600, model="bench", ids=ids, last_only=last_only)
        data = result["outputs"][0]
        return torch.frombuffer(bytearray(data["attachments"][0]), dtype=torch.float32).view(data["shape"])

    def generate(self, ids, new_tokens, decode_steps="dynamic"):
        steps = {} if decode_steps == "dynamic" else {"decode_steps": decode_steps}  # a baseline may not know it
        result = self.client.call("model.generate", timeout=600, model="bench", ids=ids, max_new_tokens=new_tokens,
                                  ignore_eos=True, **steps)
        return result["tokens"]

    def stop(self):
        if self.client:
            self.client.close()
        self.process.terminate()
        self.process.wait()


TRANSFORMERS_LOAD = r"""
import sys, torch, transformers
torch.set_num_threads(int(sys.argv[2]))
model = transformers.AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=getattr(torch, sys.argv[3])).to(sys.argv[4]).eval()
with torch.inference_mode():
    logits = model(torch.tensor([%s], device=sys.argv[4])).logits
    logits[0, -1, 0].item()
print("done", flush=True)
""" % FIRST_IDS


def transformers_load_seconds(model_dir, threads, dtype, device):
    with tempfile.TemporaryFile("w+") as errors:
        start = time.perf_counter()
        child = subprocess.Popen([sys.executable, "-c", TRANSFORMERS_LOAD, model_dir, str(threads), dtype, device],
                                 stdout=subprocess.PIPE, stderr=errors, text=True)
        line = child.stdout.readline()
        elapsed = time.perf_counter() - start
        child.wait()
        if line.strip() != "done":
            errors.seek(0)
            raise RuntimeError("the transformers load failed (exit %s): %s" % (child.returncode, errors.read()[-2000:]))
    return elapsed


def cat_seconds(files):
    start = time.perf_counter()
    subprocess.run(["cat", *files], stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(function):
    start = time.perf_counter()
    out = function()
    return time.perf_counter() - start, out


def over(a, b):
    """a / b, or nan where b is 0 (a decode too short to time under load measures 0 ms/token)."""
    return a / b if b > 0 else float("nan")


def decode_ms(generate, new_tokens):
    """ms per new token without the prefill: (T(new_tokens) - T(1)) / (new_tokens - 1), each the best of 2."""
    long_run = min(timed(lambda: generate(new_tokens))[0] for _ in range(2))
    one = min(timed(lambda: generate(1))[0] for _ in range(2))
    return max(long_run - one, 0) / (new_tokens - 1) * 1000


def memory_bandwidth(args, hf_model):
    """Bytes per second: a device-to-device copy on a GPU (read + write), a read of the model's weights on the CPU."""
    if args.device.startswith("cuda"):
        source = torch.empty(2**30, dtype=torch.uint8, device=args.device)
        target = torch.empty_like(source)
        target.copy_(source)
        sync(args.device)

        def copies():
            for _ in range(10):
                target.copy_(source)
            sync(args.device)
        return 2 * source.numel() * 10 / timed(copies)[0]
    weights = [p.detach() for p in hf_model.parameters()]
    total = sum(w.numel() * w.element_size() for w in weights)
    with torch.inference_mode():
        best = min(timed(lambda: [w.sum() for w in weights])[0] for _ in range(3))
    return total / best


def profile_ops(args):
    """gpubox-modeld --profile-decode's counts (None when it fails: the bench still reports the rest)."""
    run = subprocess.run([args.modeld, "--profile-decode", args.model_dir, "--device", args.device, "--dtype", args.dtype,
                          "--steps", "16"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    return json.loads(run.stdout) if run.returncode == 0 else None


def one_round(args, files, hf_model, prompt128, prompt16):
    """One of each measurement; returns {name: value}."""
    r = {}
    r["cat_s"] = cat_seconds(files)
    with tempfile.TemporaryDirectory() as work:
        m = Modeld(args.modeld, args.model_dir, args.device, args.dtype, work)
        try:
            m.wait_ready()
            r["modeld_ready_s"] = time.perf_counter() - m.start
            r["modeld_listening_s"] = m.listening
            r["rss_ready"] = vm_rss(m.process.pid)
            m.forward([FIRST_IDS], last_only=True)
            r["modeld_load_s"] = time.perf_counter() - m.start
            r["rss_first_logits"] = vm_rss(m.process.pid)
            r["modeld_load_cpu_s"], r["modeld_load_faults"] = cpu_and_faults(m.process.pid)
            r["held_bytes"] = m.client.call("model.info", model="bench")["memory_bytes"]
            start = time.perf_counter()
            m.forward([FIRST_IDS], last_only=True)
            r["modeld_second_forward_s"] = time.perf_counter() - start
            start = time.perf_counter()
            m.forward([prompt128])
            r["modeld_forward_tps"] = len(prompt128) / (time.perf_counter() - start)
            for batch in (1, 8):
                start = time.perf_counter()
                tokens = m.generate([prompt16] * batch, args.new_tokens)
                elapsed = time.perf_counter() - start
                assert all(len(t) == args.new_tokens for t in tokens), "modeld stopped early"
                r["modeld_generate%d_tps" % batch] = batch * args.new_tokens / elapsed
                r["modeld_tokens%d" % batch] = tokens[0]
            for steps in ("dynamic", "graph"):
                r["modeld_decode_ms_" + steps] = decode_ms(lambda n: m.generate([prompt16], n, steps), args.new_tokens)
                r["modeld_tokens_" + steps] = m.generate([prompt16], args.new_tokens, steps)[0]
            r["rss_after"] = vm_rss(m.process.pid)
            start = time.perf_counter()
            m.reload(args.model_dir, args.device, args.dtype)
            m.wait_loaded()
            m.forward([FIRST_IDS], last_only=True)
            r["modeld_runtime_load_s"] = time.perf_counter() - start
        finally:
            m.stop()
    if args.baseline_modeld:  # another build's decode, in the same round
        with tempfile.TemporaryDirectory() as work:
            b = Modeld(args.baseline_modeld, args.model_dir, args.device, args.dtype, work)
            try:
                b.wait_ready()
                r["baseline_decode_ms"] = decode_ms(lambda n: b.generate([prompt16], n), args.new_tokens)
                r["baseline_tokens"] = b.generate([prompt16], args.new_tokens)[0]
            finally:
                b.stop()
    r["hf_load_s"] = transformers_load_seconds(args.model_dir, args.threads, args.dtype, args.device)
    with torch.inference_mode():
        ids = torch.tensor([prompt128], device=args.device)
        hf_model(ids)  # warm
        sync(args.device)
        start = time.perf_counter()
        hf_model(ids).logits.float().cpu()
        r["hf_forward_tps"] = len(prompt128) / (time.perf_counter() - start)
        for batch in (1, 8):
            ids = torch.tensor([prompt16] * batch, device=args.device)
            sync(args.device)
            start = time.perf_counter()
            out = hf_model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                    max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens,
                                    pad_token_id=0)
            sync(args.device)
            elapsed = time.perf_counter() - start
            assert out.shape[1] - len(prompt16) == args.new_tokens
            r["hf_generate%d_tps" % batch] = batch * args.new_tokens / elapsed
            r["hf_tokens%d" % batch] = out[0, len(prompt16):].tolist()
        ids = torch.tensor([prompt16], device=args.device)

        def hf_generate(n):
            out = hf_model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=n,
                                    min_new_tokens=n, pad_token_id=0)
            sync(args.device)
            return out
        r["hf_decode_ms"] = decode_ms(hf_generate, args.new_tokens)
    r["bandwidth"] = memory_bandwidth(args, hf_model)
    return r


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--modeld", default=os.path.join(ROOT, "build", "bin", "gpubox-modeld"))
    parser.add_argument("--model-dir", help="where the checkpoint is cached (default build/bench-models/llama-1gb, "
                        "or a name saying the shape: default_model_dir)")
    parser.add_argument("--arch", default="llama", choices=["llama", "gpt2", "llama8b"],
                        help="the checkpoint's architecture (default llama; gpt2: GPT-2 small's shapes, "
                        "build/bench-models/gpt2-small)")
    parser.add_argument("--layers", type=int, help="a smaller model for a quick check (default: the arch's own; "
                        "llama's %d make 1.02 GB in float32)" % CONFIG["num_hidden_layers"])
    parser.add_argument("--hidden-size", type=int, help="llama8b only: a narrower width, in steps of 512, for a "
                        "rehearsal of the 8B code path on the CPU")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(),
                        help="intra-op threads of transformers (default: LibTorch's default, as modeld uses)")
    parser.add_argument("--json", help="also write every round's figures here")
    parser.add_argument("--baseline-modeld", help="another gpubox-modeld binary (an earlier build) whose batch-1 decode "
                        "is measured in the same rounds, for a before/after row")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    args.model_dir = args.model_dir or default_model_dir(args.arch, args.layers, args.hidden_size)
    os.makedirs(os.path.dirname(args.model_dir), exist_ok=True)
    make_model(args.model_dir, args.arch, args.layers, args.hidden_size)
    files = weight_files(args.model_dir)
    weight_bytes = sum(os.path.getsize(f) for f in files)
    read_bytes = decode_limit.bytes_per_step(args.model_dir, args.dtype)["read_bytes"]
    cat_seconds(files)  # page cache warm for every round
    hf_model = tf.AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=getattr(torch, args.dtype)).to(args.device).eval()
    generator = torch.Generator().manual_seed(1)
    prompt128 = torch.randint(3, CONFIG["vocab_size"], (128,), generator=generator).tolist()
    prompt16 = prompt128[:16]
    ops = profile_ops(args)
    rounds = []
    for i in range(args.repeat):
        load = os.getloadavg()[0]
        rounds.append(one_round(args, files, hf_model, prompt128, prompt16))
        rounds[-1]["loadavg"] = load
        print("round %d done (load average %.2f)" % (i + 1, load), file=sys.stderr, flush=True)

    def med(key):
        values = [r[key] for r in rounds]
        return statistics.median(values), min(values), max(values)

    def cell(key, unit):
        m, lo, hi = med(key)
        return "%.3g %s (%.3g–%.3g)" % (m, unit, lo, hi)

    print("%s: gpubox-modeld vs transformers %s, %s %s, %d threads, %.2f GB of weights (%d files), %d rounds, median (min–max)"
          % (os.path.basename(args.model_dir), tf.__version__, args.device, args.dtype, args.threads, weight_bytes / 1e9, len(files), args.repeat))
    print("load averages at each round's start: %s" % ", ".join("%.2f" % r["loadavg"] for r in rounds))
    rows = [
        ("load to first logits", "modeld_load_s", "hf_load_s", "s", False),
        ("forward, 128 tokens", "modeld_forward_tps", "hf_forward_tps", "tok/s", True),
        ("generate, batch 1", "modeld_generate1_tps", "hf_generate1_tps", "tok/s", True),
        ("generate, batch 8", "modeld_generate8_tps", "hf_generate8_tps", "tok/s", True),
    ]
    print("| | gpubox-modeld | transformers | ratio |")
    print("|---|---|---|---|")
    for label, ours, theirs, unit, higher_better in rows:
        ratio = med(ours)[0] / med(theirs)[0]
        print("| %s | %s | %s | %.2f× %s |" % (label, cell(ours, unit), cell(theirs, unit), ratio if higher_better else 1 / ratio,
                                              "faster" if higher_better else "less time"))
    print("| modeld: socket bound (process start, LibTorch loaded) | %s | | |" % cell("modeld_listening_s", "s"))
    print("| modeld: model ready | %s | | |" % cell("modeld_ready_s", "s"))
    print("| modeld: the same first forward again (warm) | %s | | |" % cell("modeld_second_forward_s", "s"))
    print("| modeld: CPU time (user + system) to first logits | %s | | |" % cell("modeld_load_cpu_s", "s"))
    print("| modeld: minor page faults to first logits | %.0f | | |" % med("modeld_load_faults")[0])
    cat = med("cat_s")[0]
    print("| `cat` the files | %s | | modeld / cat = %.2f× |" % (cell("cat_s", "s"), med("modeld_load_s")[0] / cat))
    print("| modeld: run-time model.load to first logits (process running) | %s | | modeld / cat = %.2f× |"
          % (cell("modeld_runtime_load_s", "s"), med("modeld_runtime_load_s")[0] / cat))
    held = med("held_bytes")[0]  # the weights as modeld holds them (after a cast)
    for key, label in (("rss_ready", "ready"), ("rss_first_logits", "after first logits"), ("rss_after", "after the bench")):
        rss = med(key)[0]
        print("| modeld RSS %s | %.0f MiB | weights %.0f MiB | %.2f× weights (budget %.0f MiB) |"
              % (label, rss / 2**20, held / 2**20, rss / held, (held * 1.1 + 64 * 2**20) / 2**20))
    limit_ms = read_bytes / med("bandwidth")[0] * 1000
    print("| decode, batch 1 (without prefill) | %s | %s | %.2f× faster |"
          % (cell("modeld_decode_ms_dynamic", "ms/token"), cell("hf_decode_ms", "ms/token"),
             over(med("hf_decode_ms")[0], med("modeld_decode_ms_dynamic")[0])))
    if args.baseline_modeld:
        print("| decode, batch 1, baseline %s | %s | | this build %.2f× faster; same greedy tokens: %s |"
              % (args.baseline_modeld, cell("baseline_decode_ms", "ms/token"),
                 over(med("baseline_decode_ms")[0], med("modeld_decode_ms_dynamic")[0]),
                 all(r["baseline_tokens"] == r["modeld_tokens_dynamic"] for r in rounds)))
    graph_label = "CUDA graph" if args.device.startswith("cuda") else "static-shape steps, eager (no CUDA)"
    print("| decode, batch 1, %s | %s | | %.2f× the dynamic steps' time |"
          % (graph_label, cell("modeld_decode_ms_graph", "ms/token"),
             over(med("modeld_decode_ms_graph")[0], med("modeld_decode_ms_dynamic")[0])))
    print("| the limit: bytes a step reads (%.3g GB, decode_limit.py) ÷ %s bandwidth (%.1f GB/s) | %.3g ms/token | | "
          "modeld reaches %.0f %% (graph %.0f %%), transformers %.0f %% |"
          % (read_bytes / 1e9, "device copy" if args.device.startswith("cuda") else "%d-thread read" % args.threads,
             med("bandwidth")[0] / 1e9, limit_ms, 100 * over(limit_ms, med("modeld_decode_ms_dynamic")[0]), 100 * over(limit_ms, med("modeld_decode_ms_graph")[0]),
             100 * over(limit_ms, med("hf_decode_ms")[0])))
    if ops:
        print("| modeld: LibTorch ops per layer per decode step that do work (top-level, views too: %.1f) | %.1f | | "
              "per step: %.0f ops, nested included; device kernels %.0f |"
              % (ops["layer_ops_per_layer"], ops["layer_compute_ops_per_layer"], ops["ops_per_step"],
                 ops["device_kernels_per_step"]))
    else:
        print("| modeld: ops per layer per decode step | --profile-decode failed | | |")
    same = all(r["modeld_tokens1"] == r["hf_tokens1"] for r in rounds)
    print("greedy tokens, batch 1, equal to transformers': %s" % same)
    same_steps = all(r["modeld_tokens_dynamic"] == r["modeld_tokens_graph"] for r in rounds)
    print("greedy tokens, dynamic and %s steps equal: %s" % (graph_label, same_steps))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"weight_bytes": weight_bytes, "read_bytes": read_bytes, "threads": args.threads, "device": args.device,
                       "dtype": args.dtype, "rounds": rounds}, f, indent=1)


if __name__ == "__main__":
    main()
