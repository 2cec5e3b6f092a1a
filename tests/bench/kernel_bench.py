#!/usr/bin/python3
"""Kernel bench: gpubox's kernel beside Debian's ipykernel, both driven by
jupyter_client in one run. Prints time to the first kernel_info reply
(first_kernel_info_ms: from the kernel process's launch; with_launch_ms adds
jupyter_client's own launch work), the round trip of executing `1+1` (p50/p99
over N) measured two ways, the throughput of a 20 MB stream (median of
three), idle RSS (kernel process plus its children, after one stream), and
each ratio.

The two round trips of `1+1`:
  reply_*: execute_request sent -> execute_reply received and parsed
           (jupyter_client's `execute(reply=True)`); the kernel has published
           the cell's busy, execute_input and execute_result by then. The cell's
           iopub messages are read after the clock stops.
  idle_*:  the same, plus every iopub message of the cell parsed, up to its
           idle status (what a notebook frontend waits for).
kernel_cpu_ms and client_cpu_ms are CPU time per cell (user + system) of
the kernel's processes and of this jupyter_client process over both kinds
of round trip: on a machine with few cores jupyter_client's own work
(mostly dateutil parsing two dates per message) is a floor under every
idle_* figure, whichever kernel it drives.

Both kernels run at once and the round trips and streams alternate between
them in small batches, so that load from elsewhere on the machine weighs on
both alike and the ratios stay comparable.

usage: JUPYTER_PATH=build/share/jupyter /usr/bin/python3 tests/bench/kernel_bench.py [N]
"""
import os
import statistics
import sys
import time

from jupyter_client.manager import KernelManager

KERNELS = ("gpubox", "python3")  # python3: Debian's ipykernel
ROUNDS = 10  # round trips and streams alternate between the kernels this many times
STREAM_BYTES = 20 * 1024 * 1024


def descendants(pid):
    """pid and all its descendants, from /proc."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        try:
            for task in os.listdir("/proc/%d/task" % p):
                with open("/proc/%d/task/%s/children" % (p, task)) as f:
                    todo += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return found


def rss_kib(pid):
    """RSS of pid and all its descendants."""
    total = 0
    for p in descendants(pid):
        try:
            with open("/proc/%d/status" % p) as f:
                total += next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
        except (OSError, StopIteration):
            pass
    return total


def cpu_seconds(pid):
    """User plus system CPU time of pid and all its live descendants."""
    total = 0
    for p in descendants(pid):
        try:
            with open("/proc/%d/stat" % p) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except OSError:
            pass
    return total / os.sysconf("SC_CLK_TCK")


def read_to_idle(kc, msg_id, timeout=120):
    """Reads the iopub messages of msg_id's cell up to its idle status; the stream text's length."""
    received = 0
    while True:
        msg = kc.get_iopub_msg(timeout=timeout)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "stream":
            received += len(msg["content"]["text"])
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return received


def run(kc, code, timeout=120):
    received = read_to_idle(kc, kc.execute(code), timeout)
    kc.get_shell_msg(timeout=timeout)
    return received


class Bench:
    """One kernel under test and what was measured of it."""

    def __init__(self, name):
        self.km = KernelManager(kernel_name=name)
        start = time.monotonic()
        self.km.start_kernel()
        launched = time.monotonic()  # jupyter_client's own launch work (the same for both kernels)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.kernel_info()
        self.kc.get_shell_msg(timeout=60)
        self.first_info = time.monotonic() - launched
        self.total_info = time.monotonic() - start
        self.kc.wait_for_ready(timeout=60)
        run(self.kc, "1+1")  # warm: the executor has imported what it needs
        self.reply_times, self.idle_times, self.streams, self.complete = [], [], [], True
        self.kernel_cpu = self.client_cpu = 0.0
        self.cells = 0

    def round_trips(self, n):
        pid = self.km.provisioner.process.pid
        kernel_cpu, client_cpu = cpu_seconds(pid), time.process_time()
        for _ in range(n):
            t = time.monotonic()
            reply = self.kc.execute("1+1", reply=True, timeout=120)
            self.reply_times.append(time.monotonic() - t)
            assert reply["content"]["status"] == "ok", reply["content"]
            read_to_idle(self.kc, reply["parent_header"]["msg_id"])
            t = time.monotonic()
            run(self.kc, "1+1")
            self.idle_times.append(time.monotonic() - t)
        self.kernel_cpu += cpu_seconds(pid) - kernel_cpu
        self.client_cpu += time.process_time() - client_cpu
        self.cells += 2 * n

    def stream(self):
        t = time.monotonic()
        got = run(self.kc, "import sys; sys.stdout.write('x' * %d)" % STREAM_BYTES)
        self.streams.append(STREAM_BYTES / 1e6 / (time.monotonic() - t))
        self.complete = self.complete and got == STREAM_BYTES

    def results(self):
        def percentile(times, p):
            times = sorted(times)
            return times[min(len(times) - 1, int(len(times) * p))] * 1000

        return {"first_kernel_info_ms": self.first_info * 1000, "with_launch_ms": self.total_info * 1000,
                "reply_p50_ms": percentile(self.reply_times, 0.5), "reply_p99_ms": percentile(self.reply_times, 0.99),
                "idle_p50_ms": percentile(self.idle_times, 0.5), "idle_p99_ms": percentile(self.idle_times, 0.99),
                "kernel_cpu_ms": self.kernel_cpu / self.cells * 1000, "client_cpu_ms": self.client_cpu / self.cells * 1000,
                "stream_mb_s": statistics.median(self.streams), "stream_complete": self.complete}

    def close(self):
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    benches = [Bench(name) for name in KERNELS]
    try:
        for round_ in range(ROUNDS):
            batch = n // ROUNDS + (1 if round_ < n % ROUNDS else 0)
            for bench in benches if round_ % 2 == 0 else reversed(benches):
                bench.round_trips(batch)
        for bench in benches:
            bench.stream()
        time.sleep(1)
        rss = [rss_kib(bench.km.provisioner.process.pid) / 1024 for bench in benches]  # after one stream
        for round_ in range(2):
            for bench in reversed(benches) if round_ % 2 == 0 else benches:
                bench.stream()
        results = [dict(bench.results(), idle_rss_mib=mib) for bench, mib in zip(benches, rss)]
    finally:
        for bench in benches:
            bench.close()
    ours, theirs = results
    print("%-22s %12s %12s %8s" % ("", "gpubox", "ipykernel", "ratio"))
    for key in ours:
        a, b = ours[key], theirs[key]
        if isinstance(a, bool):
            print("%-22s %12s %12s" % (key, a, b))
        else:
            print("%-22s %12.2f %12.2f %8.3f" % (key, a, b, a / b if b else float("nan")))


if __name__ == "__main__":
    main()
