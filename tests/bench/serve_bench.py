"""Served functions beside the agent's own methods, from one run (not a CI test).

    build/venv/bin/python tests/bench/serve_bench.py [--rounds N]

Starts a real agent (GPUBOX_AGENT, else build/bin/gpubox-agent) whose serve
worker runs this interpreter, serves a no-op and an echo, and prints:
serve.call of a no-op beside sys.ping (median latency), and a 64 MiB tensor
sent, returned and round-tripped via serve.call beside fs.read of the same
64 MiB (throughput), with the ratios; fs.write of 64 MiB for reference (what
an upload alone costs). Each group is timed interleaved (one of each per
round), so a noisy machine slows all of a group alike. Targets: no-op <= 2x
sys.ping; tensor >= 80 % of fs.read's throughput.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tests", "python"))
sys.path.insert(0, os.path.join(REPO, "python"))
from agent_harness import Agent  # noqa: E402

import gpubox  # noqa: E402
from gpubox import served  # noqa: E402

INTERFACE = '''
@expose
def noop():
    return None

@expose
def take(t) -> int:
    return t.numel() * t.element_size() if hasattr(t, "element_size") else t.nbytes

@expose
def give(n: int):
    if n not in BUFFERS:  # made once: the bench times sending it, not making it
        BUFFERS[n] = make(n)
    return BUFFERS[n]

@expose
def echo(t):
    return t

BUFFERS = {}
def make(n):
    try:
        import torch
        return torch.ones(n // 4, dtype=torch.float32)
    except ImportError:
        import numpy
        return numpy.ones(n // 4, dtype=numpy.float32)
'''

MIB = 1 << 20


def interleaved(fns, rounds):
    """The median time of each of fns, called one after another in each of rounds."""
    times = [[] for _ in fns]
    for _ in range(rounds):
        for fn, spent in zip(fns, times):
            began = time.perf_counter()
            fn()
            spent.append(time.perf_counter() - began)
    return [statistics.median(spent) for spent in times]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--pings", type=int, default=2000)
    parser.add_argument("--mib", type=int, default=64)
    options = parser.parse_args()
    size = options.mib * MIB
    try:
        import torch
        tensor = torch.ones(size // 4, dtype=torch.float32)
    except ImportError:
        import numpy
        tensor = numpy.ones(size // 4, dtype=numpy.float32)

    agent = Agent(config={"kernel": {"python": sys.executable}})
    work = tempfile.mkdtemp(prefix="gpubox-serve-bench-")
    try:
        client = gpubox.Client(agent.ipc)
        path = os.path.join(work, "interface.py")
        with open(path, "w") as f:
            f.write(INTERFACE)
        data_path = os.path.join(work, "data.bin")
        with open(data_path, "wb") as f:
            f.write(b"\1" * size)
        served.serve(client, path, "bench", remote_dir=work + "/remote")
        service = served.Service(client, "bench")
        service.call("echo", tensor[:16])  # the worker imports torch / numpy once, before timing
        service.call("give", size)

        for _ in range(200):
            client.call("sys.ping")
            service.call("noop")
        ping, noop = interleaved([lambda: client.call("sys.ping"), lambda: service.call("noop")], options.pings)

        def read_file():
            with client.stream("fs.read", path=data_path) as stream:
                got = sum(len(frames[0]) for _, frames in stream)
            assert got == size, got

        read_file()
        payload = bytes(size)
        fs_read, fs_write, send, receive, round_trip = interleaved([
            read_file,
            lambda: client.call("fs.write", path=work + "/written.bin", attachments=[payload]),
            lambda: service.call("take", tensor),
            lambda: service.call("give", size),
            lambda: service.call("echo", tensor),
        ], options.rounds)

        rows = [("sys.ping", ping * 1e6, "us"), ("serve.call no-op", noop * 1e6, "us")]
        print("%-34s %12s" % ("latency (median of %d)" % options.pings, ""))
        for name, value, unit in rows:
            print("  %-32s %10.1f %s" % (name, value, unit))
        print("  %-32s %10.2f x   (target <= 2)" % ("no-op / sys.ping", noop / ping))
        mib_s = lambda seconds, moved=size: moved / MIB / seconds  # noqa: E731
        print("throughput, %d MiB (median of %d)" % (options.mib, options.rounds))
        print("  %-32s %10.0f MiB/s" % ("fs.read", mib_s(fs_read)))
        print("  %-32s %10.0f MiB/s   (an upload's own cost, for reference)" % ("fs.write", mib_s(fs_write)))
        print("  %-32s %10.0f MiB/s   %5.0f %% of fs.read" % ("serve.call tensor in", mib_s(send), 100 * fs_read / send))
        print("  %-32s %10.0f MiB/s   %5.0f %% of fs.read" % ("serve.call tensor out", mib_s(receive), 100 * fs_read / receive))
        print("  %-32s %10.0f MiB/s   %5.0f %% of fs.read   (bytes moved both ways)" % (
            "serve.call tensor round trip", mib_s(round_trip, 2 * size), 100 * fs_read * 2 / round_trip))
        client.close()
    finally:
        agent.stop()
        import shutil
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
