#!/usr/bin/env python3
"""Soak: many clients, many calls, one sandbox; does anything leak or slow down?

A real sandbox (`gpubox create`, --backend local or podman) with a model host
serving the model fixture's tiny Llama and a kernel. --clients threads, each
with its own gpubox client, make --calls calls in all, mixed evenly:
sys.ping, proc.exec (echo), fs.write then fs.read of 4 KiB, kernel.execute
(a tiny cell) and model.forward (8 tokens). Reported:
  errors          calls that failed (target 0), by method and first message
  RSS and fds     of the agent and of gpubox-modeld (host /proc), before the
                  first call and after the last (target: flat within 5 MB, 0 fds),
                  and as each tenth of the calls begins: growth that stops after
                  the first tenth is the allocators' high-water mark, a leak keeps on
  p50 / p99       latency per tenth of the run, in ms (does it grow over time?)
Not a test: run it by hand, outside CI.

usage: build/venv/bin/python tests/bench/soak.py [--calls 1000000] [--clients 64]
         [--backend local|podman] [--image IMAGE] [--json FILE]
Needs root, build/bin, and the model fixture (ctest -R model_client_fixture makes it).
"""
import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python_models"))
from model_harness import CLI, fixture  # noqa: E402
import gpubox  # noqa: E402

METHODS = ("sys.ping", "proc.exec", "fs.write+read", "kernel.execute", "model.forward")


def one_call(client, kind, index, payload):
    if kind == "sys.ping":
        client.call("sys.ping")
    elif kind == "proc.exec":
        if client.call("proc.exec", argv=["echo", str(index)])["stdout"] != (str(index) + "\n").encode():
            raise AssertionError("proc.exec echoed something else")
    elif kind == "fs.write+read":
        path = "/workspace/soak-%d.bin" % (index % 64)
        client.call("fs.write", path=path, data=payload)
        if client.call("fs.read", path=path)["data"] != payload:
            raise AssertionError("fs.read returned other bytes")
    elif kind == "kernel.execute":
        client.call("kernel.execute", code="%d * 2" % index, timeout=60)
    else:
        client.call("model.forward", model="tiny", ids=[[1, 72, 101, 108, 108, 111, 32, 119]], last_only=True)


def process_figures(pid):
    with open("/proc/%d/status" % pid) as f:
        rss_kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return {"rss_mb": rss_kb / 1024.0, "fds": len(os.listdir("/proc/%d/fd" % pid))}


def modeld_pid(agent_pid):
    """gpubox-modeld among the agent's children (host pids)."""
    for task in os.listdir("/proc/%d/task" % agent_pid):
        with open("/proc/%d/task/%s/children" % (agent_pid, task)) as f:
            for child in f.read().split():
                with open("/proc/%s/comm" % child) as comm:
                    if comm.read().strip().startswith("gpubox-modeld"):
                        return int(child)
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=1_000_000)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--backend", choices=("local", "podman"), default="local")
    parser.add_argument("--image", default="localhost/gpubox-test-python:latest")
    parser.add_argument("--json")
    args = parser.parse_args()

    refs = fixture()
    state = tempfile.mkdtemp(prefix="gpubox-soak-")
    os.environ["XDG_STATE_HOME"] = state
    config = os.path.join(state, "config.json")
    with open(config, "w") as f:
        json.dump({"model_host": {"models": [{"name": "tiny", "path": "/models/tiny"}]}}, f)
    create = [CLI, "create", "--config", config, "--mount", refs["llama"] + ":/models/tiny:ro", "--memory", "4096"]
    if args.backend == "podman":
        create += ["--backend", "podman", "--image", args.image]
    sandbox = subprocess.run(create, check=True, stdout=subprocess.PIPE, text=True).stdout.strip()
    try:
        record = gpubox.find(sandbox)
        agent = record["agent_pid"]
        with gpubox.connect(sandbox) as client:
            client.model("tiny").wait_ready(timeout=120)
            client.call("kernel.execute", code="1", timeout=120)
        modeld = modeld_pid(agent)
        before = {"agent": process_figures(agent), "modeld": process_figures(modeld)}

        errors = collections.Counter()
        latencies = [[] for _ in range(10)]
        by_tenth = [None] * 10  # figures as each tenth begins
        lock = threading.Lock()
        next_call = iter(range(args.calls))
        payload = os.urandom(4096)

        def worker():
            with gpubox.connect(sandbox) as client:
                while True:
                    with lock:
                        index = next(next_call, None)
                    if index is None:
                        return
                    if index * 10 % args.calls < 10 and by_tenth[index * 10 // args.calls] is None:
                        by_tenth[index * 10 // args.calls] = {"agent": process_figures(agent), "modeld": process_figures(modeld)}
                    kind = METHODS[index % len(METHODS)]
                    started = time.perf_counter()
                    try:
                        one_call(client, kind, index, payload)
                    except Exception as e:  # counted, the soak goes on
                        with lock:
                            errors["%s: %s" % (kind, str(e)[:120])] += 1
                    elapsed = time.perf_counter() - started
                    with lock:
                        latencies[min(9, index * 10 // args.calls)].append(elapsed)

        started = time.monotonic()
        threads = [threading.Thread(target=worker) for _ in range(args.clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wall = time.monotonic() - started
        time.sleep(2)  # let freed buffers go back before measuring
        after = {"agent": process_figures(agent), "modeld": process_figures(modeld)}
    finally:
        subprocess.run([CLI, "terminate", sandbox], stdout=subprocess.DEVNULL)

    def percentile(values, q):
        values = sorted(values)
        return values[min(len(values) - 1, int(q * len(values)))] * 1000 if values else float("nan")

    print("soak: %d calls from %d clients on the %s backend in %.0f s (%.0f calls/s)"
          % (args.calls, args.clients, args.backend, wall, args.calls / wall))
    print("errors: %d" % sum(errors.values()))
    for what, count in errors.most_common(10):
        print("  %6d  %s" % (count, what))
    for name in ("agent", "modeld"):
        print("%-7s RSS %.1f -> %.1f MB (%+.1f), fds %d -> %d (%+d)"
              % (name, before[name]["rss_mb"], after[name]["rss_mb"], after[name]["rss_mb"] - before[name]["rss_mb"],
                 before[name]["fds"], after[name]["fds"], after[name]["fds"] - before[name]["fds"]))
    print("by tenth of the run: latency p50 p99 (ms); as it began: agent RSS (MB) fds, modeld RSS (MB) fds")
    for tenth, values in enumerate(latencies):
        figures = by_tenth[tenth] or {"agent": {"rss_mb": float("nan"), "fds": -1}, "modeld": {"rss_mb": float("nan"), "fds": -1}}
        print("  %3d%%  %7.2f  %7.2f   %6.1f %3d   %6.1f %3d"
              % ((tenth + 1) * 10, percentile(values, 0.5), percentile(values, 0.99), figures["agent"]["rss_mb"],
                 figures["agent"]["fds"], figures["modeld"]["rss_mb"], figures["modeld"]["fds"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"calls": args.calls, "clients": args.clients, "backend": args.backend, "wall_s": wall,
                       "errors": dict(errors), "before": before, "after": after, "by_tenth": by_tenth,
                       "p50_ms": [percentile(v, 0.5) for v in latencies],
                       "p99_ms": [percentile(v, 0.99) for v in latencies]}, f, indent=2)


if __name__ == "__main__":
    main()
