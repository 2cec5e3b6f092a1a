#!/usr/bin/env python3
"""Decode bench: gpubox-modeld's batch-1 decode alone, the model loaded once,
against the bandwidth limit measured in the same process. The device check's
headline step (tests/device/run.sh, decode_8b: --arch llama8b in bfloat16).

  ms/token        for each of model.generate's decode_steps (dynamic, fixed,
                  graph): (T(new tokens) - T(1)) / (new tokens - 1), each T
                  the best of 2 (model_bench.decode_ms); the median over
                  --repeat rounds, the kinds interleaved in each round
  graph = fixed   the same greedy request with decode_steps fixed and graph:
                  the same computation, replayed or not, so the tokens must
                  be equal (pass/fail; a difference fails the bench)
  the limit       the bytes a step reads (decode_limit.py) / the memory
                  bandwidth: gpu.probe's device copy on a GPU (asked once the
                  probe modeld runs after its start's loads has ended, so that
                  none overlaps the timings), a read of a 256 MiB buffer in
                  this process elsewhere
  gpu.info, gpu.probe  answered as expected: on cuda a GPU listed and measured
                  (copies to and from pinned host memory); elsewhere both say
                  there is no GPU

Targets (decode_limit.py), for Llama 3 8B's shape in bfloat16 on one GPU: the
fastest kind of step at >= 75 % of the limit (moonshot 85 %; gpt-fast reaches
about 83 % on an A100), graph steps at least as fast as the eager ones, and
>= 4x transformers eager, whose side transformers_decode.py measures (the
device check's transformers_8b step; its summary puts the two together).

usage: build/venv/bin/python tests/bench/decode_bench.py [--arch llama8b|llama|gpt2] [--layers N] [--hidden-size H]
           [--device cuda|cpu] [--dtype bfloat16] [--new-tokens 64] [--repeat 3] [--modeld PATH] [--json FILE]
Exit 0 when every kind of step ran, gpu.* answered as expected and graph =
fixed; 1 otherwise. Targets missed do not fail it: they are figures.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))

import torch  # noqa: E402
import decode_limit  # noqa: E402  (beside this file, as model_bench)
import model_bench  # noqa: E402
from gpubox.client import RpcError  # noqa: E402

KINDS = ("dynamic", "fixed", "graph")


def gpu_answers(client, device):
    """{method: answer} of gpu.info and gpu.probe, and the problems with them (what device must say)."""
    answers, problems = {}, []
    for method in ("gpu.info", "gpu.probe"):
        try:
            answers[method] = client.call(method, timeout=120)
        except RpcError as e:
            answers[method] = {"error": {"code": e.code, "message": e.message}}
        listed = answers[method].get("gpus" if method == "gpu.info" else "devices")
        if device.startswith("cuda"):
            good = bool(listed) and (method == "gpu.info" or all(d.get("bf16_tflops", 0) > 0 for d in listed))
        else:
            text = json.dumps(answers[method]).lower()
            good = not listed and ("no nvidia gpu" in text or "cuda is unavailable" in text)
        if not good:
            problems.append("%s answered unexpectedly on %s: %s" % (method, device, json.dumps(answers[method])[:300]))
    return answers, problems


def wait_start_probe(client, seconds=120):
    """Waits until the probe modeld runs after its start's loads has ended (modeld.status shows it)."""
    give_up = time.monotonic() + seconds
    while time.monotonic() < give_up:
        if "gpu_probe" in client.call("modeld.status", timeout=10):
            return
        time.sleep(0.2)
    raise RuntimeError("modeld.status shows no gpu_probe %d s after the model loaded" % seconds)


def cpu_read_bandwidth():
    """Bytes per second of a read (sum) of 256 MiB of float32 with this process's threads, best of 3."""
    buffer = torch.ones(2**26)
    return buffer.numel() * 4 / min(model_bench.timed(buffer.sum)[0] for _ in range(3))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default="llama8b", choices=["llama8b", "llama", "gpt2"])
    parser.add_argument("--layers", type=int, help="fewer layers (default: the arch's own)")
    parser.add_argument("--hidden-size", type=int, help="llama8b only: a narrower width, in steps of 512")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--modeld", default=os.path.join(ROOT, "build", "bin", "gpubox-modeld"))
    parser.add_argument("--model-dir", help="the checkpoint's cache (default: model_bench.default_model_dir)")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    if args.new_tokens < 2 or args.repeat < 1:
        parser.error("--new-tokens must be at least 2 and --repeat at least 1")
    if args.hidden_size and args.arch != "llama8b":
        parser.error("--hidden-size narrows the llama8b shape only")
    model_dir = args.model_dir or model_bench.default_model_dir(args.arch, args.layers, args.hidden_size)
    os.makedirs(os.path.dirname(model_dir), exist_ok=True)
    start = time.perf_counter()
    model_bench.make_model(model_dir, args.arch, args.layers, args.hidden_size)
    made_s = time.perf_counter() - start
    print("checkpoint %s ready in %.1f s" % (model_dir, made_s), flush=True)  # progress, for a step cut off at its cap
    limit_bytes = decode_limit.bytes_per_step(model_dir, args.dtype)
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    prompt = torch.randint(3, config["vocab_size"], (16,), generator=torch.Generator().manual_seed(1)).tolist()
    on_gpu = args.device.startswith("cuda")

    with tempfile.TemporaryDirectory() as work:
        modeld = model_bench.Modeld(args.modeld, model_dir, args.device, args.dtype, work)
        try:
            modeld.wait_ready()
            load_s = time.perf_counter() - modeld.start
            print("modeld loaded it in %.1f s" % load_s, flush=True)
            if on_gpu:
                wait_start_probe(modeld.client)
            answers, problems = gpu_answers(modeld.client, args.device)
            held = modeld.client.call("model.info", model="bench")
            rounds = []
            for _ in range(args.repeat):
                rounds.append({kind: model_bench.decode_ms(lambda n: modeld.generate([prompt], n, kind), args.new_tokens)
                               for kind in KINDS})
            tokens = {kind: modeld.generate([prompt], args.new_tokens, kind)[0] for kind in KINDS}
        finally:
            modeld.stop()

    ms = {kind: statistics.median(r[kind] for r in rounds) for kind in KINDS}
    devices = answers["gpu.probe"].get("devices") or []
    if on_gpu and devices:
        bandwidth, source = devices[0]["device_memory_gbps"] * 1e9, "gpu.probe's device copy"
    else:
        bandwidth, source = cpu_read_bandwidth(), "a %d-thread read in this process" % torch.get_num_threads()
    limit_ms = limit_bytes["read_bytes"] / bandwidth * 1e3
    graph_equal = tokens["graph"] == tokens["fixed"]
    rows = decode_limit.verdicts(ms, limit_ms)

    print("%s: %d layers, hidden %d, %s on %s (modeld holds %s); %.2f GB of weights, a step reads %.2f GB; "
          "checkpoint ready in %.1f s, modeld loaded in %.1f s; %d rounds of %d new tokens, median"
          % (os.path.basename(model_dir), config["num_hidden_layers"], config["hidden_size"], args.dtype, args.device,
             held.get("dtype", "?"), limit_bytes["weight_bytes"] / 1e9, limit_bytes["read_bytes"] / 1e9, made_s, load_s,
             args.repeat, args.new_tokens))
    for kind in KINDS:
        print("  decode_steps %-8s %8.3f ms/token  (%s)" % (kind, ms[kind], ", ".join("%.3f" % r[kind] for r in rounds)))
    print("  the limit: %.3f ms/token (%.2f GB at %.0f GB/s, %s)" % (limit_ms, limit_bytes["read_bytes"] / 1e9,
                                                                     bandwidth / 1e9, source))
    for what, figure, target, met in rows:
        print("  %-32s %-20s target %-26s %s" % (what, figure, target, {True: "met", False: "NOT met", None: "-"}[met]))
    print("  graph = fixed, %d greedy tokens: %s" % (args.new_tokens, "pass" if graph_equal else "FAIL"))
    print("  dynamic = fixed tokens: %s (not required: other shapes, other kernels)" % (tokens["dynamic"] == tokens["fixed"]))
    for d in devices:
        print("  gpu.probe: %s bf16 %.0f TFLOP/s, memory %.0f GB/s, H2D %.1f GB/s, D2H %.1f GB/s (%s host memory)"
              % (d.get("name", "?"), d["bf16_tflops"], d["device_memory_gbps"], d["host_to_device_gbps"],
                 d["device_to_host_gbps"], d.get("host_memory", "pageable")))
    if not graph_equal:
        problems.append("decode_steps graph gave other tokens than fixed: %s vs %s" % (tokens["graph"], tokens["fixed"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": os.path.basename(model_dir), "device": args.device, "dtype": args.dtype,
                       "held_dtype": held.get("dtype"), "layers": config["num_hidden_layers"],
                       "hidden_size": config["hidden_size"], "new_tokens": args.new_tokens, **limit_bytes,
                       "bandwidth": bandwidth, "bandwidth_source": source, "limit_ms": limit_ms, "ms": ms,
                       "rounds": rounds, "graph_equal": graph_equal, "tokens": tokens, "load_s": load_s,
                       "checkpoint_s": made_s, "gpu": answers}, f, indent=1)
    for problem in problems:
        print("FAIL: " + problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
