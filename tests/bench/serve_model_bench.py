#!/usr/bin/env python3
"""Serving bench: N concurrent clients of one gpubox-modeld model, each sending
one streamed `model.generate`, beside the same N requests served one after
another and beside transformers' batched `generate` of the same prompts, with
and without a steering op, and a check that serving many at once changes no
request's tokens. It uses only the public RPC API (model.generate,
model.stats), so it measures modeld as it is: each call on its own RPC worker
thread today, a continuous-batching scheduler once modeld has one.

The model: a random Llama-architecture checkpoint made once with transformers
and cached under BUILD/bench-models/ (--arch llama, the default: the ~1 GB
float32 model of model_bench.py, 254 M parameters, the same cache directory;
--arch small: 8 layers, d=512, vocab 8192, 32 M parameters, 0.13 GB; --arch
tiny: 4 layers, d=128, vocab 1024, 1 M parameters, for a functional check).

The requests: as many prompts as the largest N, of random ids, seeded, of
lengths uniform in [8, 64] tokens, request i always prompt i; each asks for
--new-tokens (64) new tokens, greedy, `ignore_eos`, `stream` (one DATA per
step, timed as it arrives). Two modes, each run every way below:
  plain   no interventions
  steer   one `add` op per request at blocks.L/2.hook_resid_post (--hook), at
          every pass: a random vector (0.1 × N(0, 1) per element, seeded by the
          request's index, so each request has its own), sent as an attachment

Each N of --clients (default 1,4,16,64), each mode:
  concurrent  N threads in this process, each with its own connection (a
          Client), released together; client i sends request i
  aggregate tok/s  N × new tokens / (the last response's end - the release)
  TTFT p50/p99     the CALL's send -> the first step's DATA received, over the
                   N requests
  per token p50/p99  the gaps between a request's consecutive step DATA
                   (new tokens - 1 per request), pooled over the N requests
  serial  the same N requests, one after another on one client (one pass over
          the largest N's requests per mode, before the concurrent runs; the
          figures of N use its first N requests): aggregate tok/s =
          N × new tokens / the sum of their call times; TTFT and per-token
          gaps as above
  ratios  concurrent ÷ serial aggregate; the p99 per-token gap at N ÷ the
          serial run's p99 gap over the same N requests (the gap one client
          alone sees; ≈ 1 at N = 1); modeld's plain concurrent aggregate ÷
          transformers batched
  differing outputs  how many of the N concurrent outputs' tokens differ from
          the same request's tokens in the serial run (target 0), and the
          streamed tokens are checked against the RESULT's
  transformers batched  the same N prompts (plain mode only), left-padded
          (pad id 0, attention mask), model.generate(do_sample=False,
          max_new_tokens = min_new_tokens = new tokens) in this process after
          modeld has stopped, as a user would do by hand; its aggregate tok/s
          = N × new tokens / the call's wall time (one warm-up generate first).
          How many of its rows equal modeld's serial tokens is printed as
          information (left padding may change float sums; not a target)
  model.stats  if it has a "batching" object (continuous batching: queue
          depth, running, batch rows, tokens/s, KV cache), it is printed once
          after each N, and the largest queue_depth, running and batch_rows
          seen by a poller (every 0.2 s, its own connection) during each
          concurrent run are reported; without one, nothing is printed. modeld
          runs at most 64 calls at once, so at N = 64 the poller's calls wait
          for a generate to end

Threads: modeld uses LibTorch's default intra-op thread count (the machine's
cores); this process sets torch.set_num_threads to the same (--threads).
The clients' threads share this process's GIL and, on a small machine, the
CPU with modeld: their arrival times include that.

Run time on the 2-core dev machine (CPU, float32), every N: --arch tiny 43 s
(measured, load 7-13); --arch small some 5 minutes and the default --arch
llama some 15 minutes (estimated from --clients 1,4 runs; --clients 1,4,16
for less).

usage: build/venv/bin/python tests/bench/serve_model_bench.py [--clients 1,4,16,64]
         [--arch llama|small|tiny] [--modes plain,steer] [--new-tokens 64]
         [--device cpu|cuda] [--dtype float32|bfloat16] [--build DIR] [--json FILE]
  BUILD (--build) defaults to $GPUBOX_BUILD_DIR, else the repository's build/;
  modeld is BUILD/bin/gpubox-modeld unless --modeld is given.
"""
import argparse
import json
import os
import sys
import tempfile
import threading
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "bench"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import transformers as tf  # noqa: E402
import model_bench  # noqa: E402  (the 1 GB checkpoint and the Modeld process)
from gpubox.client import Client  # noqa: E402
from gpubox.interventions import encode_ops  # noqa: E402

SMALL_CONFIG = dict(vocab_size=8192, hidden_size=512, intermediate_size=1408, num_hidden_layers=8,
                    num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=2048,
                    bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
TINY_CONFIG = dict(vocab_size=1024, hidden_size=128, intermediate_size=352, num_hidden_layers=4,
                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                   bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
ARCH_DIRS = {"llama": "llama-1gb", "small": "llama-small", "tiny": "llama-tiny"}
STATS_KEYS = ("queue_depth", "running", "batch_rows")


def make_model(directory, arch):
    """The cached checkpoint (made on first use): model_bench.py's for llama, the same recipe smaller otherwise."""
    if arch == "llama":
        return model_bench.make_model(directory, "llama", model_bench.CONFIG["num_hidden_layers"])
    if os.path.exists(os.path.join(directory, "config.json")):
        return directory
    torch.manual_seed(0)
    model = tf.LlamaForCausalLM(tf.LlamaConfig(**(SMALL_CONFIG if arch == "small" else TINY_CONFIG))).eval()
    return model_bench.save_random(model, directory)


class Request:
    """One request: its prompt, and its model.generate params and attachments for a mode."""

    def __init__(self, index, ids, new_tokens, hook, vector):
        self.index, self.ids = index, ids
        self.params = {"model": "bench", "ids": ids, "max_new_tokens": new_tokens, "temperature": 0,
                       "ignore_eos": True, "stream": True}
        self.attachments = []
        if vector is not None:
            self.params["ops"], self.attachments = encode_ops(add={hook: vector})


def make_requests(count, vocab, hidden, new_tokens, hook, seed):
    """{mode: [Request]}: count prompts of 8..64 random ids, the same in both modes."""
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(3, vocab, size=int(rng.integers(8, 65))).tolist() for _ in range(count)]
    vectors = [0.1 * np.random.default_rng(seed + 1000 + i).standard_normal(hidden).astype(np.float32)
               for i in range(count)]
    return {"plain": [Request(i, p, new_tokens, hook, None) for i, p in enumerate(prompts)],
            "steer": [Request(i, p, new_tokens, hook, v) for i, (p, v) in enumerate(zip(prompts, vectors))]}


def serve(client, request, **override):
    """One streamed model.generate: {sent, done, ttft, gaps, tokens, streamed}, times from perf_counter."""
    arrivals, streamed = [], []
    params = dict(request.params, **override)
    sent = time.perf_counter()
    with client.stream("model.generate", timeout=3600, params=params, attachments=request.attachments) as s:
        for body, _ in s:
            if "tokens" in body and "name" not in body:
                arrivals.append(time.perf_counter())
                streamed.append(body["tokens"][0])
        result = s.result
    done = time.perf_counter()
    if not arrivals:
        raise RuntimeError("request %d: no step DATA came (is stream honoured?)" % request.index)
    return {"sent": sent, "done": done, "ttft": arrivals[0] - sent, "gaps": np.diff(arrivals).tolist(),
            "tokens": list(result["tokens"]), "streamed": streamed}


def serial(endpoint, requests):
    client = Client(endpoint)
    try:
        return [serve(client, r) for r in requests]
    finally:
        client.close()


class StatsPoller:
    """Samples model.stats' "batching" every 0.2 s on its own connection; keeps the largest of STATS_KEYS."""

    def __init__(self, endpoint):
        self.peak = {}
        self.samples = 0
        self.stop_flag = threading.Event()
        self.client = Client(endpoint)
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop_flag.is_set():
            try:
                batching = self.client.call("model.stats", timeout=600, model="bench").get("batching")
            except Exception:  # noqa: BLE001 (a sample lost is not an error of the bench)
                break
            if isinstance(batching, dict):
                self.samples += 1
                for key in STATS_KEYS:
                    if isinstance(batching.get(key), (int, float)):
                        self.peak[key] = max(self.peak.get(key, 0), batching[key])
            self.stop_flag.wait(0.2)

    def stop(self):
        self.stop_flag.set()
        self.thread.join()
        self.client.close()
        return {"samples": self.samples, "peak": self.peak}


def concurrent(endpoint, requests, poll_stats):
    """The requests at once, one thread and one connection each; returns (results, wall seconds, poller's peaks)."""
    clients = [Client(endpoint) for _ in requests]
    results, errors = [None] * len(requests), []
    go = threading.Event()

    def one(i):
        go.wait()
        try:
            results[i] = serve(clients[i], requests[i])
        except Exception as error:  # noqa: BLE001 (reported below, with the request)
            errors.append("request %d: %s" % (i, error))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(requests))]
    for t in threads:
        t.start()
    poller = StatsPoller(endpoint) if poll_stats else None
    start = time.perf_counter()
    go.set()
    for t in threads:
        t.join()
    peaks = poller.stop() if poller else None
    for c in clients:
        c.close()
    if errors:
        raise RuntimeError("; ".join(errors))
    return results, max(r["done"] for r in results) - start, peaks


def pct(values, q):
    return float(np.percentile(values, q)) if len(values) else float("nan")


def summary(results, wall, new_tokens):
    ttft = [r["ttft"] for r in results]
    gaps = [g for r in results for g in r["gaps"]]
    return {"tokens_per_s": len(results) * new_tokens / wall, "wall_s": wall,
            "ttft_p50_ms": 1000 * pct(ttft, 50), "ttft_p99_ms": 1000 * pct(ttft, 99),
            "token_p50_ms": 1000 * pct(gaps, 50), "token_p99_ms": 1000 * pct(gaps, 99)}


def hf_batched(model, prompts, new_tokens, device):
    """(tokens per row, seconds) of one left-padded greedy batched generate."""
    longest = max(len(p) for p in prompts)
    ids = torch.tensor([[0] * (longest - len(p)) + p for p in prompts], device=device)
    mask = torch.tensor([[0] * (longest - len(p)) + [1] * len(p) for p in prompts], device=device)
    model_bench.sync(device)
    start = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=new_tokens,
                             min_new_tokens=new_tokens, pad_token_id=0)
    model_bench.sync(device)
    elapsed = time.perf_counter() - start
    assert out.shape[1] - longest == new_tokens
    return out[:, longest:].tolist(), elapsed


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", default="1,4,16,64", help="the values of N, comma-separated (default 1,4,16,64)")
    parser.add_argument("--modes", default="plain,steer", help="plain, steer or both (default both)")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--arch", default="llama", choices=sorted(ARCH_DIRS),
                        help="llama: model_bench.py's 1 GB checkpoint (default); small: 0.13 GB; tiny: 4 MB")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--build", default=os.environ.get("GPUBOX_BUILD_DIR") or os.path.join(ROOT, "build"),
                        help="the build directory (default $GPUBOX_BUILD_DIR, else the repository's build/)")
    parser.add_argument("--modeld", help="the gpubox-modeld binary (default BUILD/bin/gpubox-modeld)")
    parser.add_argument("--model-dir", help="where the checkpoint is cached (default BUILD/bench-models/llama-1gb, "
                        "llama-small or llama-tiny)")
    parser.add_argument("--hook", help="the steering op's hook (default blocks.L/2.hook_resid_post)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-hf", action="store_true", help="leave transformers' batched generate out")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(),
                        help="intra-op threads of transformers (default: LibTorch's default, as modeld uses)")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    counts = [int(n) for n in args.clients.split(",") if n.strip()]
    modes = [m for m in args.modes.split(",") if m.strip()]
    if not counts or min(counts) < 1 or any(m not in ("plain", "steer") for m in modes) or not modes:
        parser.error("--clients: positive integers; --modes: plain and/or steer")
    max_clients = max(counts)
    torch.set_num_threads(args.threads)
    modeld_binary = args.modeld or os.path.join(args.build, "bin", "gpubox-modeld")
    if not os.access(modeld_binary, os.X_OK):
        parser.error("no gpubox-modeld at %s (build it, or pass --build / --modeld)" % modeld_binary)
    model_dir = args.model_dir or os.path.join(args.build, "bench-models", ARCH_DIRS[args.arch])
    os.makedirs(os.path.dirname(os.path.abspath(model_dir)), exist_ok=True)
    make_model(model_dir, args.arch)
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    hook = args.hook or "blocks.%d.hook_resid_post" % (config["num_hidden_layers"] // 2)
    requests = make_requests(max_clients, config["vocab_size"], config["hidden_size"], args.new_tokens, hook, args.seed)
    model_bench.cat_seconds(model_bench.weight_files(model_dir))  # page cache warm
    loads = [os.getloadavg()[0]]

    figures = {mode: {} for mode in modes}
    serial_runs, stats_after, hf = {}, {}, {}
    with tempfile.TemporaryDirectory(prefix="serve-model-bench-") as work:
        modeld = model_bench.Modeld(modeld_binary, model_dir, args.device, args.dtype, work)
        try:
            modeld.wait_ready()
            for mode in modes:  # warm-up: a first call of each kind, 4 tokens
                serve(modeld.client, requests[mode][0], max_new_tokens=4)
            batching = "batching" in modeld.client.call("model.stats", model="bench")
            for mode in modes:
                serial_runs[mode] = serial(modeld.endpoint, requests[mode])
                print("serial %s: %d requests done (load average %.2f)" % (mode, max_clients, os.getloadavg()[0]),
                      file=sys.stderr, flush=True)
            for n in counts:
                for mode in modes:
                    results, wall, peaks = concurrent(modeld.endpoint, requests[mode][:n], batching)
                    alone = serial_runs[mode][:n]
                    s = summary(results, wall, args.new_tokens)
                    one = summary(alone, sum(r["done"] - r["sent"] for r in alone), args.new_tokens)
                    s.update({"serial": one, "concurrent_over_serial": s["tokens_per_s"] / one["tokens_per_s"],
                              "p99_token_over_serial": s["token_p99_ms"] / one["token_p99_ms"],
                              "differing_outputs": sum(r["tokens"] != a["tokens"] for r, a in zip(results, alone)),
                              "stream_result_mismatches": sum(r["streamed"] != r["tokens"] for r in results + alone),
                              "short_outputs": sum(len(r["tokens"]) != args.new_tokens for r in results),
                              "loadavg": os.getloadavg()[0]})
                    if peaks is not None:
                        s["batching_peak"] = peaks
                    figures[mode][n] = s
                    print("N=%d %s: %.1f tok/s concurrent, %.1f serial (load average %.2f)"
                          % (n, mode, s["tokens_per_s"], one["tokens_per_s"], s["loadavg"]), file=sys.stderr, flush=True)
                if batching:
                    stats_after[n] = modeld.client.call("model.stats", model="bench").get("batching")
                    print("model.stats batching after N=%d: %s" % (n, json.dumps(stats_after[n])), flush=True)
        finally:
            modeld.stop()

    if not args.no_hf:
        hf_model = tf.AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, args.dtype)).to(args.device).eval()
        hf_batched(hf_model, [requests["plain"][0].ids], 2, args.device)  # warm-up
        for n in counts:
            prompts = [r.ids for r in requests["plain"][:n]]
            tokens, seconds = hf_batched(hf_model, prompts, args.new_tokens, args.device)
            reference = serial_runs.get("plain")
            hf[n] = {"tokens_per_s": n * args.new_tokens / seconds, "wall_s": seconds,
                     "rows_equal_modeld_serial": (sum(t == r["tokens"] for t, r in zip(tokens, reference))
                                                  if reference else None)}
            print("N=%d transformers batched: %.1f tok/s" % (n, hf[n]["tokens_per_s"]), file=sys.stderr, flush=True)
        del hf_model
    loads.append(os.getloadavg()[0])

    print("%s: gpubox-modeld, %d concurrent clients vs one at a time vs transformers %s batched; %s %s, %d threads; "
          "%d new tokens per request (greedy, EOS ignored), prompts of 8–64 tokens; steer = an add op at %s"
          % (os.path.basename(os.path.normpath(model_dir)), max(counts), tf.__version__, args.device, args.dtype,
             args.threads, args.new_tokens, hook))
    print("load average at the start and the end: %.2f, %.2f" % tuple(loads))
    print("| N | mode | concurrent tok/s | serial tok/s | ×serial | TTFT p50 / p99 ms | serial TTFT p50 / p99 ms "
          "| per token p50 / p99 ms | serial per token p50 / p99 ms | p99 per token ÷ 1 client | transformers batched tok/s "
          "| modeld ÷ transformers | differing outputs |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for n in counts:
        for mode in modes:
            s = figures[mode][n]
            one = s["serial"]
            peer = hf.get(n) if mode == "plain" else None
            print("| %d | %s | %.1f | %.1f | %.2f× | %.0f / %.0f | %.0f / %.0f | %.1f / %.1f | %.1f / %.1f | %.2f× | %s | %s | %d of %d |"
                  % (n, mode, s["tokens_per_s"], one["tokens_per_s"], s["concurrent_over_serial"],
                     s["ttft_p50_ms"], s["ttft_p99_ms"], one["ttft_p50_ms"], one["ttft_p99_ms"],
                     s["token_p50_ms"], s["token_p99_ms"], one["token_p50_ms"], one["token_p99_ms"],
                     s["p99_token_over_serial"], "%.1f" % peer["tokens_per_s"] if peer else "—",
                     "%.2f×" % (s["tokens_per_s"] / peer["tokens_per_s"]) if peer else "—",
                     s["differing_outputs"], n))
    differing = sum(figures[m][n]["differing_outputs"] for m in modes for n in counts)
    print("concurrent outputs whose tokens differ from the same request served alone: %d (target 0)" % differing)
    broken = sum(figures[m][n]["stream_result_mismatches"] + figures[m][n]["short_outputs"] for m in modes for n in counts)
    if broken:
        print("streamed tokens unlike the RESULT's, or outputs short of %d tokens: %d" % (args.new_tokens, broken))
    if "steer" in modes and "plain" in modes:
        changed = sum(a["tokens"] != b["tokens"] for a, b in zip(serial_runs["plain"], serial_runs["steer"]))
        print("steering changed the tokens of %d of %d requests (serial)" % (changed, max_clients))
    for n in counts:
        if hf.get(n) and hf[n]["rows_equal_modeld_serial"] is not None:
            print("N=%d: transformers' batched rows equal to modeld's serial tokens: %d of %d (information: left padding)"
                  % (n, hf[n]["rows_equal_modeld_serial"], n))
        for mode in modes:
            if "batching_peak" in figures[mode][n]:
                p = figures[mode][n]["batching_peak"]
                print("N=%d %s: model.stats batching during the run, %d samples, peak %s"
                      % (n, mode, p["samples"], json.dumps(p["peak"])))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": model_dir, "arch": args.arch, "device": args.device, "dtype": args.dtype,
                       "threads": args.threads, "new_tokens": args.new_tokens, "hook": hook, "clients": counts,
                       "loadavg": loads, "modeld": {m: {str(n): v for n, v in figures[m].items()} for m in modes},
                       "transformers_batched": {str(n): v for n, v in hf.items()},
                       "batching_after": {str(n): v for n, v in stats_after.items()},
                       "serial_requests": {m: [{"prompt_tokens": len(r.ids), "ttft_s": x["ttft"],
                                                "seconds": x["done"] - x["sent"]}
                                               for r, x in zip(requests[m], serial_runs[m])] for m in modes}},
                      f, indent=1)


if __name__ == "__main__":
    main()
