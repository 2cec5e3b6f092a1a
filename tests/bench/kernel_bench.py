#!/usr/bin/python3
"""Kernel bench: gpubox's kernel beside Debian's ipykernel, both driven by
jupyter_client in one run. Prints time to the first kernel_info reply, the
round trip of executing `1+1` (p50/p99 over N)
(first_kernel_info_ms: from the kernel process's launch; with_launch_ms adds
jupyter_client's own launch work), the throughput of a 20 MB
stream, and idle RSS (kernel process plus its children).

usage: JUPYTER_PATH=build/share/jupyter /usr/bin/python3 tests/bench/kernel_bench.py [N]
"""
import os
import statistics
import sys
import time

from jupyter_client.manager import KernelManager


def rss_kib(pid):
    """RSS of pid and all its descendants, from /proc."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open("/proc/%d/status" % p) as f:
                total += next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
            with open("/proc/%d/task/%d/children" % (p, p)) as f:
                todo += [int(c) for c in f.read().split()]
        except (OSError, StopIteration):
            pass
    return total


def run(kc, code, timeout=120):
    msg_id = kc.execute(code)
    received = 0
    while True:
        msg = kc.get_iopub_msg(timeout=timeout)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "stream":
            received += len(msg["content"]["text"])
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            break
    kc.get_shell_msg(timeout=timeout)
    return received


def bench(name, n):
    km = KernelManager(kernel_name=name)
    start = time.monotonic()
    km.start_kernel()
    launched = time.monotonic()  # jupyter_client's own launch work (the same for both kernels)
    kc = km.client()
    kc.start_channels()
    kc.kernel_info()
    kc.get_shell_msg(timeout=60)
    first_info = time.monotonic() - launched
    total_info = time.monotonic() - start
    kc.wait_for_ready(timeout=60)
    run(kc, "1+1")  # warm: the executor has imported what it needs
    times = []
    for _ in range(n):
        t = time.monotonic()
        run(kc, "1+1")
        times.append(time.monotonic() - t)
    times.sort()
    size = 20 * 1024 * 1024
    t = time.monotonic()
    got = run(kc, "import sys; sys.stdout.write('x' * %d)" % size)
    stream_s = time.monotonic() - t
    time.sleep(1)
    rss = rss_kib(km.provisioner.process.pid)
    kc.stop_channels()
    km.shutdown_kernel(now=True)
    return {"first_kernel_info_ms": first_info * 1000, "with_launch_ms": total_info * 1000, "p50_ms": times[len(times) // 2] * 1000,
            "p99_ms": times[int(len(times) * 0.99) - 1] * 1000, "stream_mb_s": size / 1e6 / stream_s,
            "stream_complete": got == size, "idle_rss_mib": rss / 1024}


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    results = {name: bench(name, n) for name in ("gpubox", "python3")}
    keys = list(results["gpubox"])
    print("%-22s %12s %12s" % ("", "gpubox", "ipykernel"))
    for key in keys:
        a, b = results["gpubox"][key], results["python3"][key]
        fmt = "%-22s %12s %12s" if isinstance(a, bool) else "%-22s %12.2f %12.2f"
        print(fmt % (key, a, b))


if __name__ == "__main__":
    main()
