#!/usr/bin/python3
"""MCP bench: `execute_code` of `1+1` through `gpubox mcp` beside `gpubox
run-code ID '1+1'`, in the same local sandbox, in one run. Prints the
median and p90 of each (ms) and the ratio of the medians.

  mcp_execute_code: tools/call written to the server's stdin -> its response
                    line read and parsed (one long-lived `gpubox mcp`, as an
                    agent keeps it; a raw pipe, so no SDK's own cost is in it).
  run_code:         the whole `gpubox run-code` process: start, connect, the
                    cell, exit (what a shell-driving agent pays per cell).

The two alternate in small batches so load from elsewhere on the machine
weighs on both alike. Needs root (a local sandbox).

usage: /usr/bin/python3 tests/bench/mcp_bench.py [N]   (GPUBOX_CLI, GPUBOX_AGENT: default build/bin/)
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.environ.get("GPUBOX_CLI") or os.path.join(REPO, "build", "bin", "gpubox")
AGENT = os.environ.get("GPUBOX_AGENT") or os.path.join(REPO, "build", "bin", "gpubox-agent")
BATCH = 5


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    state = tempfile.mkdtemp(prefix="gpubox-mcp-bench-")
    env = dict(os.environ, XDG_STATE_HOME=state, GPUBOX_AGENT=AGENT)
    server = None
    try:
        created = subprocess.run([CLI, "create"], env=env, capture_output=True, text=True, check=True)
        box = created.stdout.strip()
        server = subprocess.Popen([CLI, "mcp", "--sandbox", box], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL)
        ids = iter(range(1, 1 << 30))

        def request(method, params):
            id = next(ids)
            server.stdin.write((json.dumps({"jsonrpc": "2.0", "id": id, "method": method, "params": params}) + "\n").encode())
            server.stdin.flush()
            while True:
                message = json.loads(server.stdout.readline())
                if message.get("id") == id:
                    return message

        request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}})

        def mcp_once():
            started = time.perf_counter()
            reply = request("tools/call", {"name": "execute_code", "arguments": {"code": "1+1"}})
            elapsed = time.perf_counter() - started
            assert reply["result"]["structuredContent"]["results"] == ["2"], reply
            return elapsed

        def run_code_once():
            started = time.perf_counter()
            ran = subprocess.run([CLI, "run-code", box, "1+1"], env=env, capture_output=True, text=True)
            elapsed = time.perf_counter() - started
            assert ran.returncode == 0 and ran.stdout == "2\n", ran
            return elapsed

        for _ in range(3):  # warm: the kernel's executor starts at the first cell
            mcp_once()
            run_code_once()
        mcp, run_code = [], []
        while len(mcp) < n:
            mcp += [mcp_once() for _ in range(BATCH)]
            run_code += [run_code_once() for _ in range(BATCH)]
        rows = [("mcp_execute_code", mcp), ("run_code", run_code)]
        print("%-18s %10s %10s" % ("1+1 (%d each)" % len(mcp), "p50 ms", "p90 ms"))
        for name, values in rows:
            print("%-18s %10.2f %10.2f" % (name, statistics.median(values) * 1e3, percentile(values, 0.9) * 1e3))
        print("ratio mcp/run-code (p50): %.2f" % (statistics.median(mcp) / statistics.median(run_code)))
    finally:
        if server:
            server.stdin.close()
            server.wait(timeout=30)
        subprocess.run([CLI, "terminate", "--all"], env=env, capture_output=True)
        shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    main()
