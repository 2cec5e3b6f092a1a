#!/usr/bin/env python3
"""The one summary of tests/device/run.sh: summary.txt (a line a step: result,
seconds, key figures) and summary.json (the same, with every figure file the
steps wrote), from run.sh's steps.tsv and figures/ folder.

usage: summarize.py --steps steps.tsv --figures DIR --mode cuda|cpu --seconds S --carry DIR --out DIR
Exit 0 when every step passed, 1 otherwise.
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import sys


def load(figures, name):
    path = os.path.join(figures, name + ".json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def compare(report):
    models = report["models"]
    worst = max(models.items(), key=lambda item: item[1]["logits_relative_error"] / item[1]["bound"])
    return "%d/%d models within bounds, greedy equal %d/%d; worst %s %.1e (bound %.1e)" % (
        sum(m["passed"] for m in models.values()), len(models), sum(m["greedy_equal"] for m in models.values()),
        len(models), worst[0], worst[1]["logits_relative_error"], worst[1]["bound"])


def gpu_info_probe(answers):
    gpus = answers.get("gpu.info", {}).get("gpus") or []
    devices = answers.get("gpu.probe", {}).get("devices") or []
    if not gpus:
        return "no GPU (as expected in a dry run)"
    parts = ["%s %.0f GiB" % (g.get("name", "?"), g.get("memory_total_bytes", 0) / 2**30) for g in gpus]
    for d in devices:
        parts.append("bf16 %.0f TFLOP/s, fp32 %.0f TFLOP/s, memory %.0f GB/s, H2D %.1f GB/s, D2H %.1f GB/s"
                     % (d.get("bf16_tflops", 0), d.get("fp32_tflops", 0), d.get("device_memory_gbps", 0),
                        d.get("host_to_device_gbps", 0), d.get("device_to_host_gbps", 0)))
    return "; ".join(parts)


def percent(a, b):
    """100 a / b, or nan where b is 0 (a decode too short to time under load measures 0 ms/token)."""
    return 100 * a / b if b > 0 else float("nan")


def model_bench(report):
    rounds = report["rounds"]

    def med(key):
        return statistics.median(r[key] for r in rounds)
    limit_ms = report["weight_bytes"] / med("bandwidth") * 1e3
    line = ("%.2f GB %s: generate b1 %.1f vs transformers %.1f tok/s (%.2fx), b8 %.2fx; load to first logits %.2f s vs %.2f s"
            % (report["weight_bytes"] / 1e9, report["dtype"], med("modeld_generate1_tps"), med("hf_generate1_tps"),
               med("modeld_generate1_tps") / med("hf_generate1_tps"), med("modeld_generate8_tps") / med("hf_generate8_tps"),
               med("modeld_load_s"), med("hf_load_s")))
    same = all(r["modeld_tokens_dynamic"] == r["modeld_tokens_graph"] for r in rounds)
    return line + ("; decode %.2f ms/token (graph %.2f, tokens equal: %s) vs transformers %.2f; limit %.3f ms/token: "
                   "%.0f %% (graph %.0f %%)" % (med("modeld_decode_ms_dynamic"), med("modeld_decode_ms_graph"), same,
                                               med("hf_decode_ms"), limit_ms, percent(limit_ms, med("modeld_decode_ms_dynamic")),
                                               percent(limit_ms, med("modeld_decode_ms_graph"))))


def hooks_bench(report):
    parts = []
    for row in report["rows"]:
        for peer, seconds in row["peers_s"].items():
            parts.append("%s: %s %.2fx" % (row["label"], peer, seconds / row["ours_s"]))
    parts.append("steered generate %+.0f %%" % (100 * (report["generate_steered_s"] / report["generate_plain_s"] - 1)))
    fn = report.get("fn_against_add_s")
    if fn:
        parts.append("fn add / native add: run %.2fx, generate %.2fx" % (fn["run_fn"] / fn["run_add"], fn["gen_fn"] / fn["gen_add"]))
    if report["left_out"]:
        parts.append("left out: " + ", ".join(report["left_out"]))
    return "; ".join(parts)


def decode_profile(report):
    return ("%.2f ms/token; per step %.0f ops (%.1f per layer), %.0f device kernels"
            % (report["ms_per_token"], report["top_level_ops_per_step"], report["top_level_ops_per_layer_per_step"],
               report["device_kernels_per_step"]))


def sae_bench(report):
    return ("top-k SAE capture %+.1f %% over a plain forward (target <= 10 %%); the caller's capture + CPU encode "
            "%.2fx ours (target >= 2x); same features %.4f" % (100 * report["overhead"], report["speedup"], report["agree"]))


def bandwidth_limit(figures):
    """The decode profile's ms/token against its limit, weight bytes / the probe's memory bandwidth ("" without both)."""
    profile = figures.get("decode_profile") or {}
    devices = (figures.get("gpu_info_probe") or {}).get("gpu.probe", {}).get("devices") or []
    gbps = devices[0].get("device_memory_gbps", 0) if devices else 0
    if not gbps or "weight_bytes" not in profile or profile["device"] == "cpu":
        return ""
    limit_ms = profile["weight_bytes"] / (gbps * 1e9) * 1e3
    return "bandwidth limit %.3f ms/token (%.0f GB at %.0f GB/s): %.0f %% of it" % (
        limit_ms, profile["weight_bytes"] / 1e9, gbps, 100 * limit_ms / profile["ms_per_token"])


FIGURES = {"compare_float32": compare, "compare_bfloat16": compare, "gpu_info_probe": gpu_info_probe,
           "model_bench": model_bench, "model_bench_8b": model_bench, "hooks_bench": hooks_bench,
           "decode_profile": decode_profile, "sae_bench": sae_bench}


def log_line(logs, name):
    """The last non-empty line of a step's log: its PASS or FAIL line."""
    path = os.path.join(logs, name + ".log")
    if not os.path.exists(path):
        return ""
    with open(path, errors="replace") as f:
        lines = [line.strip() for line in f if line.strip()]
    return lines[-1][:200] if lines else ""


def carry_mib(carry):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(carry) for f in files) / 2**20


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for flag in ("--steps", "--figures", "--mode", "--seconds", "--carry", "--out"):
        parser.add_argument(flag, required=True)
    args = parser.parse_args()
    logs = os.path.join(os.path.dirname(args.steps), "logs")
    steps, figures = [], {}
    with open(args.steps) as f:
        for line in f:
            name, result, seconds, code, note = (line.rstrip("\n").split("\t") + [""] * 5)[:5]
            entry = {"step": name, "result": result, "seconds": float(seconds), "exit": code, "note": note}
            data = load(args.figures, name)
            if data is not None:
                figures[name] = data
            key = ""
            try:
                key = FIGURES[name](data) if data is not None and name in FIGURES else ""
            except (KeyError, ValueError, ZeroDivisionError, TypeError) as e:
                key = "figures unreadable: %r" % e
            entry["key_figures"] = note or key or log_line(logs, name)
            steps.append(entry)
    limit = bandwidth_limit(figures)
    for step in steps:
        if step["step"] == "decode_profile" and limit and not step["note"]:
            step["key_figures"] += "; %s" % limit
    passed = sum(s["result"] == "pass" for s in steps)
    failed = sum(s["result"] in ("fail", "timeout") for s in steps)
    not_run = sum(s["result"] == "not_run" for s in steps)
    header = "gpubox device check, %s, %s on %s, carry %.1f MiB, %s s" % (
        "cuda" if args.mode == "cuda" else "--cpu-dry-run (cpu)", datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        platform.node(), carry_mib(args.carry), args.seconds)
    lines = [header, "%-20s %-8s %8s  %s" % ("step", "result", "seconds", "key figures")]
    lines += ["%-20s %-8s %8.1f  %s" % (s["step"], s["result"], s["seconds"], s["key_figures"]) for s in steps]
    lines.append("%d passed, %d failed, %d not run" % (passed, failed, not_run))
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "summary.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump({"header": header, "mode": args.mode, "seconds": float(args.seconds), "passed": passed, "failed": failed,
                   "not_run": not_run, "steps": steps, "figures": figures}, f, indent=1)
    return 0 if passed == len(steps) else 1


if __name__ == "__main__":
    sys.exit(main())
