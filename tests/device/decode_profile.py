#!/usr/bin/env python3
"""One decode step of gpubox-modeld, profiled: time per token at batch 1, the
LibTorch ops per step (and per layer) and the device kernels per step, and
the bytes a step reads (decode_limit.py: the limit's numerator), from
`gpubox-modeld --profile-decode` on the model bench's random Llama
(tests/bench/model_bench.py makes it, or reuses the one it made).

usage: decode_profile.py --modeld PATH [--device cuda|cpu] [--dtype bfloat16] [--layers N] [--steps 32] [--json FILE]
Exit 0 when modeld profiled the steps and they show time, at least one op per
layer, and device kernels exactly when on a GPU; 1 otherwise.
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "bench"))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "model", "modeld"))

import decode_limit  # noqa: E402
import model_bench  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modeld", required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--layers", type=int, default=model_bench.CONFIG["num_hidden_layers"])
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--json", help="write modeld's figures here")
    args = parser.parse_args()
    name = "llama-1gb" if args.layers == model_bench.CONFIG["num_hidden_layers"] else "llama-%dl" % args.layers
    directory = os.path.join(ROOT, "build", "bench-models", name)
    os.makedirs(os.path.dirname(directory), exist_ok=True)
    model_bench.make_model(directory, "llama", args.layers)
    run = subprocess.run([args.modeld, "--profile-decode", directory, "--device", args.device, "--dtype", args.dtype,
                          "--steps", str(args.steps)], stdout=subprocess.PIPE, text=True)
    if run.returncode != 0:
        print("gpubox-modeld --profile-decode exited with status %d" % run.returncode)
        return 1
    profile = json.loads(run.stdout)
    profile["read_bytes"] = decode_limit.bytes_per_step(directory, args.dtype)["read_bytes"]  # the limit's numerator
    print(json.dumps(profile, indent=1))
    # What any decode step must show: time, at least one op per layer, and kernels on a GPU.
    problems = [what for what, bad in (
        ("no time per token", not profile["ms_per_token"] > 0),
        ("fewer LibTorch ops than layers", profile["top_level_ops_per_step"] < profile["layers"]),
        ("no device kernels on cuda", args.device.startswith("cuda") and not profile["device_kernels_per_step"] > 0),
        ("kernels counted on the CPU", args.device == "cpu" and profile["device_kernels_per_step"] != 0)) if bad]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(profile, f, indent=1)
    print("%s %s, %d layers: %.2f ms/token; per decode step %.0f LibTorch ops (%.1f per layer; %.0f with nested ones), "
          "%.0f device kernels" % (profile["device"], profile["dtype"], profile["layers"], profile["ms_per_token"],
                                   profile["top_level_ops_per_step"], profile["top_level_ops_per_layer_per_step"],
                                   profile["ops_per_step"], profile["device_kernels_per_step"]))
    for problem in problems:
        print("FAIL: " + problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
