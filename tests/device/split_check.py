#!/usr/bin/env python3
"""The device check's split_2gpu step (tests/device/run.sh): one model split
over two GPUs by gpubox-modeld ("device": "cuda:0,1": two ranks, NCCL through
libgpubox_nccl_ranks.so) against the same model on cuda:0 alone, served by
the same modeld. Under --cpu-dry-run (--device cpu) the same code path with
two CPU ranks ("tensor_parallel": 2, "allow_cpu_split": true, Gloo) against
one CPU.

Checks (exit 1 when one fails):
  what is held    model.info of the split: devices cuda:0 and cuda:1 (cpu,
                  cpu), tensor_parallel 2, each rank under 56 % of the whole
                  model's bytes (everything is halved but the norms)
  logits          model.run's logits of two 11-token prompts, tiny_models.py's
                  random Llama (3 layers, 4 heads in 2 KV groups: each rank 2
                  heads and 1 group), as max |split - one| / max |one|:
    float32   1e-5: the ranks compute the same products as one device; only
              the order of the sums differs (the attention's and the MLP's
              output are two halves added by the all-reduce), a few float32
              roundings (2^-24) a layer; seen under 1e-6 on the CPU
              (tests/model/modeld/test_modeld_tensor_parallel.py), and any
              real mistake (a wrong head, unit or vocabulary slice) moves the
              logits by more than 1e-2
    bfloat16  3e-2: each rank's half of a sublayer's output is rounded to
              bf16 (8-bit mantissa: a relative step of up to 2^-8) before the
              all-reduce adds the halves in bf16 and rounds again, where one
              device rounds the whole sum once; two sublayers a layer, three
              layers and the final norm carry up to a few such roundings to
              the logits (a few x 2^-8 = 0.4 %, the worst of 704 logits a
              few times that); seen on the CPU (Gloo), six seeds:
              0.9e-2 to 1.3e-2 (float32: 4e-7 to 7e-7)
  greedy tokens   12 greedy tokens: equal in float32; in bf16 the agreement is
                  printed, not required (a near tie within the bound may flip
                  a token, after which the generations differ: as compare_hf.py)

Figures (not judged): the cost of the split per layer. Batch-1 greedy decode,
ms/token = (T(new tokens) - T(1)) / (new tokens - 1) (model_bench.decode_ms),
of a bf16 Llama of width --hidden at two depths, split and on one device;
the slope between the depths is the time a layer adds to a token, which
leaves out what every token costs once (sampling, the RPC, the embedding).
The split's slope minus one device's is what splitting adds per layer: two
all-reduces of one token's hidden row and the ranks' lockstep, less the
compute the halving saves (at this width a decode step is launch-bound on a
GPU, so little). Beside it, NCCL's (Gloo's on the CPU) all-reduce itself,
timed in this process: two threads, one per GPU, a process group each,
back-to-back all-reduces of a hidden-sized row (8192 bf16 values, Llama 70B's
width, and --hidden's), the mean of --allreduce-iterations after a warm-up;
the figure tests/bench/split_bench.py assumes (10-20 us).

On a machine with one GPU it prints one line saying why not and exits 77,
which run.sh records as skipped.

Interpreter: the GPU machine's python3 (torch, transformers; pyzmq from the
carry), or build/venv/bin/python here.
usage: split_check.py --device cuda|cpu [--modeld PATH] [--json FILE] [--hidden 1024] [--depths 2,8]
           [--new-tokens 32] [--repeat 3] [--allreduce-iterations 200]
Exit 0: every check passed; 1: one failed; 77: fewer than 2 GPUs.
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "model", "modeld"))
sys.path.insert(0, os.path.join(ROOT, "tests", "bench"))

import torch  # noqa: E402

BOUNDS = {"float32": 1e-5, "bfloat16": 3e-2}
RANK_SHARE = 0.56  # of the whole model's bytes, at most, on each rank
CLEAN = [5, 17, 33, 2, 9, 100, 7, 8, 19, 44, 3]
CORRUPT = [5, 17, 61, 2, 9, 100, 7, 80, 19, 44, 3]
GREEDY_TOKENS = 12
LLAMA70B_HIDDEN = 8192


def relative_error(got, want):
    return float((got - want).abs().max() / want.abs().max())


def timing_model(directory, hidden, layers):
    """A random bf16-able Llama of width hidden (heads of 128 where it allows, else 4 heads; 2 KV groups: one per
    rank), MLP 3.5x, a 2048-row vocabulary, `layers` deep; saved under directory/llama-HIDDEN-LAYERS."""
    import tiny_models
    import transformers as tf
    heads = hidden // 128 if hidden >= 512 else 4
    config = tf.LlamaConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                            num_key_value_heads=2, intermediate_size=hidden * 7 // 2, vocab_size=2048,
                            max_position_embeddings=512, bos_token_id=1, eos_token_id=2)
    path = os.path.join(directory, "llama-%d-%d" % (hidden, layers))
    tiny_models.randomize(tf.LlamaForCausalLM(config), seed=layers).save_pretrained(path)
    return path


def allreduce_us(device, numel, dtype, iterations):
    """Mean microseconds of one all-reduce of numel values between two ranks, each a thread of this process with
    its own process group (NCCL on cuda:0 and cuda:1, Gloo on the CPU), back to back after 20 warm-up ones."""
    import torch.distributed as dist
    store, seconds, errors = dist.HashStore(), [None, None], []
    timeout = datetime.timedelta(seconds=30)

    def rank(r):
        try:
            if device == "cuda":
                torch.cuda.set_device(r)
                group = dist.ProcessGroupNCCL(store, r, 2, timeout)
                row = torch.ones(numel, dtype=dtype, device="cuda:%d" % r)
            else:
                group = dist.ProcessGroupGloo(store, r, 2, timeout)
                row = torch.ones(numel, dtype=dtype)
            for _ in range(20):
                group.allreduce([row]).wait()
            if device == "cuda":
                torch.cuda.synchronize(r)
            start = time.perf_counter()
            for _ in range(iterations):
                group.allreduce([row]).wait()
            if device == "cuda":
                torch.cuda.synchronize(r)
            seconds[r] = time.perf_counter() - start
        except Exception as error:  # reported by the caller
            errors.append("rank %d: %r" % (r, error))

    threads = [threading.Thread(target=rank, args=(r,), daemon=True) for r in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    if errors or None in seconds:
        raise RuntimeError("; ".join(errors) or "an all-reduce did not finish within 60 s")
    return max(seconds) / iterations * 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", required=True, choices=["cuda", "cpu"])
    parser.add_argument("--modeld", default=os.environ.get("GPUBOX_MODELD") or os.path.join(ROOT, "build", "bin", "gpubox-modeld"))
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--hidden", type=int, default=1024, help="the timing models' width")
    parser.add_argument("--depths", default="2,8", help="the timing models' two depths, in layers")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--allreduce-iterations", type=int, default=200)
    args = parser.parse_args()
    depths = [int(d) for d in args.depths.split(",")]
    if len(depths) != 2 or depths[0] >= depths[1] or args.new_tokens < 2:
        parser.error("--depths takes two depths, the smaller first; --new-tokens at least 2")
    if args.device == "cuda":
        gpus = torch.cuda.device_count()
        if gpus < 2:
            print("split_2gpu: this machine has %d GPU%s; a split needs 2" % (gpus, "" if gpus == 1 else "s"))
            return 77
        one_spec, split_spec = {"device": "cuda:0"}, {"device": "cuda:0,1"}
        want_devices = ["cuda:0", "cuda:1"]
    else:
        one_spec, split_spec = {"device": "cpu"}, {"device": "cpu", "tensor_parallel": 2, "allow_cpu_split": True}
        want_devices = ["cpu", "cpu"]

    import model_bench
    import modeld_process
    import tiny_models
    from gpubox.models import Model
    modeld_process.MODELD = args.modeld
    problems, figures = [], {"device": args.device, "bounds": BOUNDS}
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="split-check-") as work:
        tiny, _ = tiny_models.make(work, "llama", seed=7)
        timed = {layers: timing_model(work, args.hidden, layers) for layers in depths}
        entries = []
        for dtype in BOUNDS:
            entries += [dict(one_spec, name="tiny-one-" + dtype, path=tiny, dtype=dtype),
                        dict(split_spec, name="tiny-split-" + dtype, path=tiny, dtype=dtype)]
        for layers, path in timed.items():
            entries += [dict(one_spec, name="one-%d" % layers, path=path, dtype="bfloat16"),
                        dict(split_spec, name="split-%d" % layers, path=path, dtype="bfloat16")]
        print("models made in %.1f s" % (time.perf_counter() - began), flush=True)
        modeld = modeld_process.Modeld(entries, os.path.join(work, "run"))
        try:
            try:
                modeld.wait_all_ready()
            except AssertionError as error:
                print("modeld's log:\n" + modeld.log_text()[-3000:])
                print("FAIL: split_2gpu: not every model loaded: %s" % error)
                return 1
            print("modeld loaded %d models in %.1f s" % (len(entries), time.perf_counter() - began), flush=True)
            client = modeld.client

            for dtype, bound in BOUNDS.items():
                one_name, split_name = "tiny-one-" + dtype, "tiny-split-" + dtype
                info, whole = client.call("model.info", model=split_name), client.call("model.info", model=one_name)
                shares = [held / whole["memory_bytes"] for held in info["rank_memory_bytes"]]
                if info["devices"] != want_devices or info["tensor_parallel"] != 2 or max(shares) > RANK_SHARE:
                    problems.append("%s: model.info devices %s, tensor_parallel %s, rank shares %s (want %s, 2, each "
                                    "<= %.2f)" % (split_name, info["devices"], info["tensor_parallel"], shares,
                                                  want_devices, RANK_SHARE))
                one, split = Model(client, one_name), Model(client, split_name)
                error = relative_error(split.run(ids=[CLEAN, CORRUPT])["logits"].float(),
                                       one.run(ids=[CLEAN, CORRUPT])["logits"].float())
                want = one.generate(CLEAN, max_new_tokens=GREEDY_TOKENS, temperature=0)["tokens"]
                got = split.generate(CLEAN, max_new_tokens=GREEDY_TOKENS, temperature=0)["tokens"]
                agree = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
                figures[dtype] = {"logits_relative_error": error, "bound": bound, "greedy_agree": agree,
                                  "greedy_tokens": len(want), "rank_shares": shares}
                print("%-8s logits max |split - one| / max |one| = %.2e (bound %.0e); greedy tokens equal for %d of %d"
                      "%s; each rank holds %s of the model"
                      % (dtype, error, bound, agree, len(want), "" if dtype == "float32" else " (not required)",
                         " / ".join("%.0f %%" % (100 * s) for s in shares)), flush=True)
                if not error < bound:
                    problems.append("%s logits: relative error %.2e over the bound %.0e" % (dtype, error, bound))
                if dtype == "float32" and (got != want or len(want) != GREEDY_TOKENS):
                    problems.append("float32 greedy tokens differ: split %s, one device %s" % (got, want))

            prompt = list(range(3, 19))
            rounds = []
            for _ in range(args.repeat):
                rounds.append({name: model_bench.decode_ms(
                    lambda n: client.call("model.generate", timeout=120, model=name, ids=[prompt], max_new_tokens=n,
                                          ignore_eos=True, temperature=0), args.new_tokens)
                    for layers in depths for name in ("one-%d" % layers, "split-%d" % layers)})
        finally:
            modeld.close()

    ms = {name: statistics.median(r[name] for r in rounds) for name in rounds[0]}
    per_layer = {kind: (ms["%s-%d" % (kind, depths[1])] - ms["%s-%d" % (kind, depths[0])]) / (depths[1] - depths[0]) * 1e3
                 for kind in ("one", "split")}
    figures["decode"] = {"hidden": args.hidden, "depths": depths, "new_tokens": args.new_tokens, "ms": ms,
                         "rounds": rounds, "per_layer_us": per_layer,
                         "split_adds_per_layer_us": per_layer["split"] - per_layer["one"]}
    print("decode, bf16, width %d, batch 1, ms/token (median of %d): %s"
          % (args.hidden, args.repeat, ", ".join("%s %.3f" % item for item in ms.items())))
    print("per layer: one device %.1f us, split %.1f us: the split adds %.1f us a layer (2 all-reduces and the lockstep, "
          "less the compute the halving saves)" % (per_layer["one"], per_layer["split"], per_layer["split"] - per_layer["one"]))

    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    figures["allreduce_us"] = {}
    for numel in sorted({LLAMA70B_HIDDEN, args.hidden}):
        try:
            us = allreduce_us(args.device, numel, dtype, args.allreduce_iterations)
            figures["allreduce_us"][str(numel)] = us
            print("%s all-reduce of %d %s values between 2 ranks (threads of this process): %.1f us each, mean of %d"
                  % ("NCCL" if args.device == "cuda" else "Gloo", numel, str(dtype).replace("torch.", ""), us,
                     args.allreduce_iterations))
        except Exception as error:  # a figure, not a check: the step still judges the split itself
            figures["allreduce_us"][str(numel)] = None
            print("all-reduce of %d values not measured: %s" % (numel, error))

    figures["problems"] = problems
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=1)
    for problem in problems:
        print("FAIL: " + problem)
    if problems:
        return 1
    print("PASS: split over %s: float32 %.1e, bfloat16 %.1e of the logits (bounds %.0e, %.0e); split adds %.1f us a layer"
          % (" and ".join(want_devices), figures["float32"]["logits_relative_error"],
             figures["bfloat16"]["logits_relative_error"], BOUNDS["float32"], BOUNDS["bfloat16"],
             per_layer["split"] - per_layer["one"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
