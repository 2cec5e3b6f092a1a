#!/usr/bin/env python3
"""gpu.info and gpu.probe of a gpubox-modeld started here, checked: on cuda
every GPU is listed and the probe measured each (bf16 TFLOP/s above 0); on the
CPU (--device cpu, the dry run) both answer plainly that there is no GPU.

usage: gpu_info_probe.py --modeld PATH [--device cuda|cpu] [--json FILE]
Exit 0 when both answers are as expected, 1 otherwise.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "model", "modeld"))

from gpubox.client import RpcError  # noqa: E402
from modeld_process import connect_when_bound  # noqa: E402


def expected(method, answer, device):
    """Whether answer is what method must say on device."""
    listed = answer.get("gpus" if method == "gpu.info" else "devices")
    if device == "cuda":
        return bool(listed) and (method == "gpu.info" or all(d.get("bf16_tflops", 0) > 0 for d in listed))
    text = json.dumps(answer).lower()
    return not listed and ("no nvidia gpu" in text or "cuda is unavailable" in text)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modeld", required=True)
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--json", help="write both answers here")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="gpu-probe-")
    endpoint = "ipc://" + os.path.join(work, "modeld.sock")
    process = subprocess.Popen([args.modeld, "--endpoint", endpoint])
    answers, ok = {}, True
    try:
        client = connect_when_bound(endpoint, process)
        for method in ("gpu.info", "gpu.probe"):
            try:
                answer = client.call(method, timeout=300)
            except RpcError as e:
                answer = {"error": {"code": e.code, "message": e.message}}
            good = expected(method, answer, args.device)
            answers[method] = answer
            print(method, json.dumps(answer, indent=1)[:3000])
            print("%s: %s" % (method, "ok" if good else "UNEXPECTED"))
            ok &= good
        client.close()
    finally:
        process.terminate()
        process.wait()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(answers, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
