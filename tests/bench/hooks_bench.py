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

Ours goes through the RPC (a Unix socket) and gets the float32 logits of every
position back; the peers run in this process. Threads: torch's default in
both processes.

usage: build/venv/bin/python tests/bench/hooks_bench.py [--repeat 7] [--tokens 128] [--long 1000]
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "host", "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "model", "modeld"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("GPUBOX_MODELD", os.path.join(ROOT, "build", "bin", "gpubox-modeld"))

import torch  # noqa: E402
import transformers as tf  # noqa: E402
from gpubox.models import Model  # noqa: E402
from modeld_process import Modeld  # noqa: E402

CONFIG = dict(vocab_size=8192, hidden_size=512, intermediate_size=1408, num_hidden_layers=8, num_attention_heads=8,
              num_key_value_heads=4, max_position_embeddings=2048, bos_token_id=1, eos_token_id=2)
TOKENIZER = os.path.join(ROOT, "tests", "assets", "node_modules", "@lenml", "tokenizer-gpt2", "models", "tokenizer.json")


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
    args = parser.parse_args()

    work = tempfile.mkdtemp(prefix="hooks-bench-")
    torch.manual_seed(0)
    hf = tf.LlamaForCausalLM(tf.LlamaConfig(**CONFIG)).eval()
    path = os.path.join(work, "llama")
    hf.save_pretrained(path)
    tf.PreTrainedTokenizerFast(tokenizer_file=TOKENIZER).save_pretrained(path)
    modeld = Modeld([{"name": "m", "path": path}], os.path.join(work, "run"))
    modeld.wait_all_ready()
    ours = Model(modeld.client, "m")
    layer = CONFIG["num_hidden_layers"] // 2
    hook = "blocks.%d.hook_resid_post" % layer
    all_layers = ["blocks.%d.hook_resid_post" % l for l in range(CONFIG["num_hidden_layers"])]
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(3, CONFIG["vocab_size"], (1, args.tokens), generator=gen)
    long_ids = torch.randint(3, CONFIG["vocab_size"], (1, args.long), generator=gen)
    vector = torch.randn(CONFIG["hidden_size"], generator=gen)
    rows = []

    def no_grad(fn):
        def run():
            with torch.no_grad():
                return fn()
        return run

    from nnsight import LanguageModel
    lm = LanguageModel(hf, tokenizer=tf.PreTrainedTokenizerFast(tokenizer_file=TOKENIZER))

    def nnsight_one():
        with torch.no_grad(), lm.trace(ids):
            saved = lm.model.layers[layer].output.save()
        return saved

    def nnsight_empty():
        with torch.no_grad(), lm.trace(ids):
            pass

    from transformer_lens.model_bridge import TransformerBridge
    bridge = TransformerBridge.boot_transformers(path, hf_model=hf, device="cpu")
    id_rows = ids.tolist()
    t = interleaved_medians({
        "plain": lambda: ours.run(ids=id_rows),
        "one": lambda: ours.run(ids=id_rows, capture=[hook]),
        "one_last": lambda: ours.run(ids=id_rows, capture=[hook], last_only=True),
        "hf_plain": no_grad(lambda: hf(ids)),
        "nn_one": nnsight_one,
        "nn_empty": nnsight_empty,
        "tl_one": no_grad(lambda: bridge.run_with_cache(ids, names_filter=[hook])),
        "tl_plain": no_grad(lambda: bridge(ids)),
    }, args.repeat)
    plain, one, one_last, hf_plain = t["plain"], t["one"], t["one_last"], t["hf_plain"]
    nn_one, nn_empty, tl_one, tl_plain = t["nn_one"], t["nn_empty"], t["tl_one"], t["tl_plain"]

    rows.append(("plain forward, %d tokens" % args.tokens, plain, [("transformers", hf_plain), ("TransformerLens", tl_plain)]))
    rows.append(("one capture", one, [("nnsight", nn_one), ("TransformerLens", tl_one)]))
    rows.append(("one capture, last-position logits", one_last, [("nnsight", nn_one), ("TransformerLens", tl_one)]))

    long_all = median_seconds(lambda: ours.run(ids=long_ids.tolist(), capture=all_layers), max(3, args.repeat // 2))
    long_plain = median_seconds(lambda: ours.run(ids=long_ids.tolist()), max(3, args.repeat // 2))
    tl_all = median_seconds(no_grad(lambda: bridge.run_with_cache(long_ids, names_filter=all_layers)), max(3, args.repeat // 2))
    captured_bytes = args.long * CONFIG["hidden_size"] * 4 * len(all_layers)
    rows.append(("all-layer resid capture, %d tokens" % args.long, long_all, [("TransformerLens", tl_all)]))

    steer_ops = {"add": {hook: (vector, 4.0)}}
    gen_plain = median_seconds(lambda: ours.generate(ids[:, :16].tolist()[0], max_new_tokens=args.new_tokens, ignore_eos=True),
                               max(3, args.repeat // 2))
    gen_steered = median_seconds(lambda: ours.generate(ids[:, :16].tolist()[0], max_new_tokens=args.new_tokens,
                                                       ignore_eos=True, **steer_ops), max(3, args.repeat // 2))

    modeld.close()

    print("interventions: gpubox-modeld vs nnsight %s and TransformerLens on a random Llama (%d layers, d=%d, %.0f M params), "
          "CPU, %d threads, median of %d" % (__import__("nnsight").__version__, CONFIG["num_hidden_layers"], CONFIG["hidden_size"],
                                              sum(p.numel() for p in hf.parameters()) / 1e6, torch.get_num_threads(), args.repeat))
    print()
    print("| | gpubox-modeld | peer | ratio (peer / ours) |")
    print("|---|---|---|---|")
    for label, mine, peers in rows:
        for name, theirs in peers:
            print("| %s | %.1f ms | %s %.1f ms | %.2f× |" % (label, mine * 1e3, name, theirs * 1e3, theirs / mine))
    print("| overhead of one capture | %+.1f %% over plain | nnsight %+.1f %%, TransformerLens %+.1f %% over their plain | |"
          % (100 * (one / plain - 1), 100 * (nn_one / hf_plain - 1), 100 * (tl_one / tl_plain - 1)))
    print("| nnsight empty trace | | %.1f ms (%.1f ms over transformers) | |" % (nn_empty * 1e3, (nn_empty - hf_plain) * 1e3))
    extra = long_all - long_plain
    speed = "%.0f MiB/s over plain" % (captured_bytes / 2**20 / extra) if extra > 0 else "within the noise of plain"
    print("| all-layer capture, %d tokens: %.1f MiB of captures | %.1f ms (plain %.1f ms: %s) | | |"
          % (args.long, captured_bytes / 2**20, long_all * 1e3, long_plain * 1e3, speed))
    print("| generate %d tokens, steered at every step | %.1f ms (plain %.1f ms: %+.1f %%) | | |"
          % (args.new_tokens, gen_steered * 1e3, gen_plain * 1e3, 100 * (gen_steered / gen_plain - 1)))


if __name__ == "__main__":
    main()
