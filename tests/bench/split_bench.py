#!/usr/bin/env python3
"""Split bench: batch-1 decode of one model served by one gpubox-modeld as one
rank and as a tensor-parallel split (docs/models.md; model/modeld/split/), both
hosted by the same modeld and measured in the same rounds, with the ratio;
then the arithmetic of what a split over GPUs gives a model too big for one.

  ms/token      greedy model.generate after a 16-token prompt, batch 1, EOS
                ignored: (T(new tokens) - T(1)) / (new tokens - 1), each T the
                best of 2 (model_bench.decode_ms), the prefill left out; the
                median over --repeat rounds, one rank and the split
                interleaved in each round
  same tokens   the two greedy generations of --new-tokens tokens, equal or
                not (in float32 the split differs from one rank only in the
                order of the all-reduce's sums: equal expected)
  memory        model.info's memory_bytes (one rank) and rank_memory_bytes
                (each rank of the split)
  the estimate  for a decode step on N GPUs: weight bytes / N read at the
                GPU's HBM bandwidth, plus 2 all-reduces a layer (after the
                attention and after the MLP) at an assumed NCCL latency;
                printed for Llama 3 70B's shapes in bfloat16 on 1, 2 and 4
                H100s (and H200s), next to whether the weights fit at all

The model: a random Llama (transformers from a config, save_pretrained,
cached under build/bench-models/llama-split): hidden 1536, 8 layers, 16
heads of 96 in 8 KV groups, MLP 4096, vocabulary 32000; 306 M parameters,
1.22 GB in float32. Each rank of a 2-way split holds 8 heads (4 KV groups),
2048 MLP units and 16000 rows of the vocabulary.

On the CPU (the default: --device cpu, "tensor_parallel": N,
"allow_cpu_split": true) the ranks are threads of modeld and share the
machine's cores: on a 2-core machine two ranks have no more cores or memory
bandwidth than one, so the ratio is for the record (what the split's
all-reduces and lockstep cost), not a speedup. With --device cuda the split
is "device": "cuda", "tensor_parallel": --ranks (cuda:0 .. cuda:N-1, NCCL)
against "cuda:0" alone: the real comparison, on a machine with N GPUs.

usage: build/venv/bin/python tests/bench/split_bench.py [--device cpu|cuda] [--ranks 2] [--dtype float32]
           [--new-tokens 64] [--repeat 3] [--modeld PATH] [--json FILE]
Run by hand, not in CI. Exit 0 when both ran; 1 when modeld failed, or in
float32 the split's greedy tokens differ from one rank's.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "model", "modeld"))

import torch  # noqa: E402
import transformers as tf  # noqa: E402

import decode_limit  # noqa: E402  (beside this file)
import model_bench  # noqa: E402
import modeld_process  # noqa: E402

# 306 M parameters, 1.22 GB in float32: compute (the products) well above the all-reduces of a 1536-wide row.
CONFIG = dict(vocab_size=32000, hidden_size=1536, intermediate_size=4096, num_hidden_layers=8,
              num_attention_heads=16, num_key_value_heads=8, max_position_embeddings=2048,
              bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
# Llama 3 70B's shapes (bfloat16: 141 GB of weights).
LLAMA70B = dict(layers=80, hidden=8192, heads=64, kv_heads=8, intermediate=28672, vocab=128256)
# Peak HBM bandwidth, bytes/s, and memory, bytes (SXM parts).
GPUS = {"H100": (3.35e12, 80e9), "H200": (4.8e12, 141e9)}
# NCCL all-reduce of one token's hidden row (8192 bf16: 16 KiB) between GPUs over NVLink, seconds: an assumption,
# not a measurement here (a small all-reduce is latency-bound; tests/device/split_check.py measures it on 2 GPUs).
ALLREDUCE_S = (10e-6, 20e-6)


def make_model(directory):
    """The cached random checkpoint (made once, about 20 s on 2 cores)."""
    if os.path.exists(os.path.join(directory, "config.json")):
        return directory
    torch.manual_seed(0)
    return model_bench.save_random(tf.LlamaForCausalLM(tf.LlamaConfig(**CONFIG)).eval(), directory)


def llama_bytes(shape, bytes_per_weight=2):
    """(weight bytes, bytes a decode step reads) of a Llama of these shapes: untied embedding, of which a step
    reads one row."""
    h, head = shape["hidden"], shape["hidden"] // shape["heads"]
    kv = shape["kv_heads"] * head
    layer = 2 * h * h + 2 * h * kv + 3 * h * shape["intermediate"] + 2 * h
    table = shape["vocab"] * h
    total = shape["layers"] * layer + 2 * table + h
    return total * bytes_per_weight, (total - table + h) * bytes_per_weight


def estimate_ms(read_bytes, layers, gpus, bandwidth, allreduce_s):
    """A decode step on `gpus` GPUs: each reads its 1/gpus of the bytes at `bandwidth`, plus two all-reduces a
    layer when split. A lower bound: real decode reaches some 75-85 % of the peak bandwidth."""
    return (read_bytes / gpus / bandwidth + (2 * layers * allreduce_s if gpus > 1 else 0.0)) * 1e3


def print_estimate():
    weight_bytes, read_bytes = llama_bytes(LLAMA70B)
    layers = LLAMA70B["layers"]
    print("What N GPUs would give: Llama 3 70B's shapes (%d layers, hidden %d, %d heads, %d KV heads, MLP %d, "
          "vocabulary %d), bfloat16: %.1f GB of weights, a decode step reads %.1f GB"
          % (layers, LLAMA70B["hidden"], LLAMA70B["heads"], LLAMA70B["kv_heads"], LLAMA70B["intermediate"],
             LLAMA70B["vocab"], weight_bytes / 1e9, read_bytes / 1e9))
    print("  ms/token >= bytes read / N / peak HBM bandwidth + 2 x %d layers x NCCL all-reduce of a %d-wide bf16 row "
          "(assumed %.0f-%.0f us over NVLink: latency-bound, not measured here); the KV cache and the GPU's other "
          "memory not counted" % (layers, LLAMA70B["hidden"], ALLREDUCE_S[0] * 1e6, ALLREDUCE_S[1] * 1e6))
    for name, (bandwidth, memory) in GPUS.items():
        for gpus in (1, 2, 4):
            held = weight_bytes / gpus
            if held > memory:
                print("  %d x %s (%.2f TB/s, %.0f GB each): impossible, %.1f GB of weights per GPU over its %.0f GB"
                      % (gpus, name, bandwidth / 1e12, memory / 1e9, held / 1e9, memory / 1e9))
                continue
            low, high = (estimate_ms(read_bytes, layers, gpus, bandwidth, s) for s in ALLREDUCE_S)
            reads = read_bytes / gpus / bandwidth * 1e3
            print("  %d x %s (%.2f TB/s, %.0f GB each): %.1f GB per GPU; %.1f ms reading + %.1f-%.1f ms of all-reduces "
                  "= %.1f-%.1f ms/token (%.0f-%.0f tokens/s at best)"
                  % (gpus, name, bandwidth / 1e12, memory / 1e9, held / 1e9, reads, low - reads, high - reads,
                     low, high, 1e3 / high, 1e3 / low))


def generate(client, model, prompt, new_tokens):
    return client.call("model.generate", timeout=600, model=model, ids=[prompt], max_new_tokens=new_tokens,
                       ignore_eos=True, temperature=0)["tokens"][0]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--ranks", type=int, default=2, help="the split's ranks (on cuda: GPUs 0 .. N-1)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--modeld", default=os.path.join(ROOT, "build", "bin", "gpubox-modeld"))
    parser.add_argument("--model-dir", default=os.path.join(ROOT, "build", "bench-models", "llama-split"))
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    if args.new_tokens < 2 or args.repeat < 1 or args.ranks < 2:
        parser.error("--new-tokens and --ranks must be at least 2, --repeat at least 1")
    if args.device == "cuda" and torch.cuda.device_count() < args.ranks:
        parser.error("--ranks %d on cuda: this machine has %d GPU(s)" % (args.ranks, torch.cuda.device_count()))
    if not os.path.exists(args.modeld):
        parser.error("%s is missing (scripts/build.sh builds it, or pass --modeld)" % args.modeld)

    start = time.perf_counter()
    make_model(args.model_dir)
    print("checkpoint %s ready in %.1f s" % (args.model_dir, time.perf_counter() - start), flush=True)
    sizes = decode_limit.bytes_per_step(args.model_dir, args.dtype)
    prompt = torch.randint(3, CONFIG["vocab_size"], (16,), generator=torch.Generator().manual_seed(1)).tolist()
    one_device = "cuda:0" if args.device == "cuda" else "cpu"
    split = {"device": args.device, "tensor_parallel": args.ranks}
    if args.device == "cpu":
        split["allow_cpu_split"] = True
    common = {"path": args.model_dir, "dtype": args.dtype}
    modeld_process.MODELD = args.modeld
    with tempfile.TemporaryDirectory(prefix="split-bench-") as work:
        modeld = modeld_process.Modeld([dict(common, name="one", device=one_device), dict(common, name="split", **split)],
                                       work)
        try:
            try:
                modeld.wait_all_ready()
            except AssertionError as e:
                print("FAIL: modeld did not load both: %s\n%s" % (e, modeld.log_text()[-3000:]))
                return 1
            print("modeld loaded both in %.1f s" % (time.perf_counter() - start), flush=True)
            info = {name: modeld.client.call("model.info", model=name) for name in ("one", "split")}
            rounds = []
            for i in range(args.repeat):
                rounds.append({name: model_bench.decode_ms(lambda n: generate(modeld.client, name, prompt, n),
                                                           args.new_tokens) for name in ("one", "split")})
                print("round %d: one rank %.2f ms/token, split %.2f" % (i + 1, rounds[-1]["one"], rounds[-1]["split"]),
                      file=sys.stderr, flush=True)
            tokens = {name: generate(modeld.client, name, prompt, args.new_tokens) for name in ("one", "split")}
        finally:
            modeld.close()

    ms = {name: statistics.median(r[name] for r in rounds) for name in ("one", "split")}
    same = tokens["one"] == tokens["split"]
    print("%s: %d layers, hidden %d, %d heads (%d KV), MLP %d, vocabulary %d; %s on %s; %.2f GB of weights, a step "
          "reads %.2f GB; %d rounds of %d new tokens after a 16-token prompt, batch 1, median (rounds)"
          % (os.path.basename(args.model_dir), CONFIG["num_hidden_layers"], CONFIG["hidden_size"],
             CONFIG["num_attention_heads"], CONFIG["num_key_value_heads"], CONFIG["intermediate_size"],
             CONFIG["vocab_size"], args.dtype, args.device, sizes["weight_bytes"] / 1e9, sizes["read_bytes"] / 1e9,
             args.repeat, args.new_tokens))
    print("  one rank (%s)            %8.2f ms/token  (%s); holds %.0f MiB"
          % (", ".join(info["one"]["devices"]), ms["one"], ", ".join("%.2f" % r["one"] for r in rounds),
             info["one"]["memory_bytes"] / 2**20))
    print("  split, %d ranks (%s) %8.2f ms/token  (%s); each rank holds %s MiB"
          % (args.ranks, ", ".join(info["split"]["devices"]), ms["split"], ", ".join("%.2f" % r["split"] for r in rounds),
             " / ".join("%.0f" % (b / 2**20) for b in info["split"]["rank_memory_bytes"])))
    print("  split / one rank: %.2fx the time per token (%.2fx the speed)"
          % (ms["split"] / ms["one"], ms["one"] / ms["split"]))
    print("  greedy tokens equal (%d): %s" % (args.new_tokens, same))
    if args.device == "cpu":
        print("  note: on the CPU the %d ranks are threads of one modeld, each running its products on the same %d "
              "cores and memory bandwidth as one rank does alone: the ratio records what the split costs here, it is "
              "not a speedup claim; a split pays where each rank has a device of its own" % (args.ranks, os.cpu_count()))
    print()
    print_estimate()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": args.device, "ranks": args.ranks, "dtype": args.dtype, "config": CONFIG, **sizes,
                       "ms": ms, "rounds": rounds, "tokens": tokens, "same_tokens": same,
                       "info": {name: {k: info[name].get(k) for k in ("devices", "memory_bytes", "rank_memory_bytes")}
                                for name in info}}, f, indent=1)
    if args.dtype == "float32" and not same:
        print("FAIL: in float32 the split's greedy tokens differ from one rank's")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
