#!/usr/bin/env python3
"""The one summary of tests/device/run.sh: summary.txt (a line a step: result,
seconds, key figures) and summary.json (the same, with every figure file the
steps wrote), from run.sh's steps.tsv and figures/ folder. run.sh writes it
again after every step, so a run cut off at any moment still returns one:
the steps of --planned that steps.tsv does not list yet are "not_run", "not
reached". A step that cannot apply to the machine (split_2gpu on one GPU:
run.sh records its exit 77 as "skipped") counts as neither passed nor failed,
and does not fail the run. Each file is written beside its name, then renamed
over it.

usage: summarize.py --steps steps.tsv --figures DIR --mode cuda|cpu --seconds S --carry DIR --out DIR [--planned "A B"]
Exit 0 when every step passed or was skipped, 1 otherwise.
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
import decode_limit  # noqa: E402  (the targets; no torch import)


def load(figures, name):
    path = os.path.join(figures, name + ".json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def compare(report, figures):
    models = report["models"]
    worst = max(models.items(), key=lambda item: item[1]["logits_relative_error"] / item[1]["bound"])
    return "%d/%d models within bounds, greedy equal %d/%d; worst %s %.1e (bound %.1e)" % (
        sum(m["passed"] for m in models.values()), len(models), sum(m["greedy_equal"] for m in models.values()),
        len(models), worst[0], worst[1]["logits_relative_error"], worst[1]["bound"])


def probe_text(answers):
    """gpu.info's GPUs and gpu.probe's figures, or what the answers say where there is no GPU."""
    gpus = answers.get("gpu.info", {}).get("gpus") or []
    devices = answers.get("gpu.probe", {}).get("devices") or []
    if not gpus:
        return "no GPU (as expected in a dry run)"
    parts = ["%s %.0f GiB" % (g.get("name", "?"), g.get("memory_total_bytes", 0) / 2**30) for g in gpus]
    for d in devices:
        parts.append("bf16 %.0f TFLOP/s, fp32 %.0f TFLOP/s, memory %.0f GB/s, H2D %.1f GB/s, D2H %.1f GB/s (%s)"
                     % (d.get("bf16_tflops", 0), d.get("fp32_tflops", 0), d.get("device_memory_gbps", 0),
                        d.get("host_to_device_gbps", 0), d.get("device_to_host_gbps", 0), d.get("host_memory", "pageable")))
    return "; ".join(parts)


def decode_8b(report, figures):
    """The headline: ms/token by kind of step, the limit, each target and whether it is met, graph = fixed."""
    hf = figures.get("transformers_8b")
    ms = report["ms"]
    rows = decode_limit.verdicts(ms, report["limit_ms"], hf["decode_ms"] if hf else None)
    return ("%s %s, %d layers: decode ms/token dynamic %.3f, fixed %.3f, graph %.3f; limit %.3f (%.2f GB read a step "
            "at %.0f GB/s); %s; graph = fixed tokens: %s; %s"
            % (report["model"], report["held_dtype"] or report["dtype"], report["layers"], ms["dynamic"], ms["fixed"],
               ms["graph"], report["limit_ms"], report["read_bytes"] / 1e9, report["bandwidth"] / 1e9,
               decode_limit.verdict_text(rows), "pass" if report["graph_equal"] else "FAIL", probe_text(report["gpu"])))


def transformers_8b(report, figures):
    ours = figures.get("decode_8b")
    line = "transformers %s eager %.3f ms/token (loaded in %.1f s)" % (report["transformers"], report["decode_ms"],
                                                                       report["load_s"])
    if ours:
        best = min(ours["ms"].values())
        line += "; modeld %.3f: %.2fx (target >= %.0fx)" % (best, percent(report["decode_ms"], best) / 100,
                                                            decode_limit.OVER_TRANSFORMERS)
    return line


def percent(a, b):
    """100 a / b, or nan where b is 0 (a decode too short to time under load measures 0 ms/token)."""
    return 100 * a / b if b > 0 else float("nan")


def model_bench(report, figures):
    rounds = report["rounds"]

    def med(key):
        return statistics.median(r[key] for r in rounds)
    limit_ms = report.get("read_bytes", report["weight_bytes"]) / med("bandwidth") * 1e3
    line = ("%.2f GB %s: generate b1 %.1f vs transformers %.1f tok/s (%.2fx), b8 %.2fx; load to first logits %.2f s vs %.2f s"
            % (report["weight_bytes"] / 1e9, report["dtype"], med("modeld_generate1_tps"), med("hf_generate1_tps"),
               med("modeld_generate1_tps") / med("hf_generate1_tps"), med("modeld_generate8_tps") / med("hf_generate8_tps"),
               med("modeld_load_s"), med("hf_load_s")))
    same = all(r["modeld_tokens_dynamic"] == r["modeld_tokens_graph"] for r in rounds)
    return line + ("; decode %.2f ms/token (graph %.2f, tokens equal: %s) vs transformers %.2f; limit %.3f ms/token: "
                   "%.0f %% (graph %.0f %%)" % (med("modeld_decode_ms_dynamic"), med("modeld_decode_ms_graph"), same,
                                               med("hf_decode_ms"), limit_ms, percent(limit_ms, med("modeld_decode_ms_dynamic")),
                                               percent(limit_ms, med("modeld_decode_ms_graph"))))


def hooks_bench(report, figures):
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


def decode_profile(report, figures):
    line = ("%.2f ms/token; per step %.0f ops (%.1f per layer), %.0f device kernels"
            % (report["ms_per_token"], report["top_level_ops_per_step"], report["top_level_ops_per_layer_per_step"],
               report["device_kernels_per_step"]))
    return line + bandwidth_limit(report, figures)


def sae_bench(report, figures):
    return ("%s: top-k SAE capture" % report.get("dtype", "?") + (" %+.1f %% over a plain forward (target <= 10 %%); the caller's capture + CPU encode "
            "%.2fx ours (target >= 2x); same features %.4f" % (100 * report["overhead"], report["speedup"], report["agree"])))


def split_2gpu(report, figures):
    """Split against one device: each dtype's logits error against its bound and greedy agreement, what the split
    adds per layer, the all-reduce's own time."""
    parts = ["%s %.1e (bound %.0e), greedy %d/%d" % (dtype, report[dtype]["logits_relative_error"], report[dtype]["bound"],
                                                    report[dtype]["greedy_agree"], report[dtype]["greedy_tokens"])
             for dtype in ("float32", "bfloat16")]
    decode = report["decode"]
    parts.append("per layer one %.1f us, split %.1f us: +%.1f us" % (
        decode["per_layer_us"]["one"], decode["per_layer_us"]["split"], decode["split_adds_per_layer_us"]))
    parts += ["all-reduce of %s: %s" % (numel, "%.1f us" % us if us is not None else "not measured")
              for numel, us in report["allreduce_us"].items()]
    return "; ".join(parts)


def bandwidth_limit(profile, figures):
    """"; " and the profile's ms/token against its limit, the bytes a step reads / decode_8b's measured bandwidth
    ("" on the CPU, or before decode_8b has run)."""
    bench = figures.get("decode_8b") or {}
    if profile["device"] == "cpu" or "read_bytes" not in profile or not bench.get("device", "").startswith("cuda"):
        return ""
    limit_ms = profile["read_bytes"] / bench["bandwidth"] * 1e3
    return "; bandwidth limit %.3f ms/token (%.2f GB read at %.0f GB/s): %.0f %% of it" % (
        limit_ms, profile["read_bytes"] / 1e9, bench["bandwidth"] / 1e9, 100 * limit_ms / profile["ms_per_token"])


FIGURES = {"compare_float32": compare, "compare_bfloat16": compare, "decode_8b": decode_8b,
           "transformers_8b": transformers_8b, "model_bench": model_bench, "hooks_bench": hooks_bench,
           "decode_profile": decode_profile, "sae_bench": sae_bench, "split_2gpu": split_2gpu}


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


def write(path, text):
    """Writes path's text beside it, then renames it over path: a run cut off mid-write leaves the last whole one."""
    with open(path + ".partial", "w") as f:
        f.write(text)
    os.replace(path + ".partial", path)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for flag in ("--steps", "--figures", "--mode", "--seconds", "--carry", "--out"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--planned", default="", help="every step's name, in order, separated by spaces")
    args = parser.parse_args()
    logs = os.path.join(os.path.dirname(args.steps), "logs")
    steps = []
    if os.path.exists(args.steps):
        with open(args.steps) as f:
            for line in f:
                name, result, seconds, code, note = (line.rstrip("\n").split("\t") + [""] * 5)[:5]
                steps.append({"step": name, "result": result, "seconds": float(seconds), "exit": code, "note": note})
    done = {s["step"] for s in steps}
    steps += [{"step": name, "result": "not_run", "seconds": 0.0, "exit": "-", "note": "not reached"}
              for name in args.planned.split() if name not in done]
    # Every figure first: a step's line may set its figures against a later step's (the limit, transformers).
    figures = {s["step"]: load(args.figures, s["step"]) for s in steps}
    figures = {name: data for name, data in figures.items() if data is not None}
    for entry in steps:
        name, key = entry["step"], ""
        try:
            key = FIGURES[name](figures[name], figures) if name in figures and name in FIGURES else ""
        except (KeyError, ValueError, ZeroDivisionError, TypeError) as e:
            key = "figures unreadable: %r" % e
        entry["key_figures"] = entry["note"] or key or log_line(logs, name)
    passed = sum(s["result"] == "pass" for s in steps)
    failed = sum(s["result"] in ("fail", "timeout") for s in steps)
    not_run = sum(s["result"] == "not_run" for s in steps)
    skipped = sum(s["result"] == "skipped" for s in steps)
    header = "gpubox device check, %s, %s on %s, carry %.1f MiB, %s s" % (
        "cuda" if args.mode == "cuda" else "--cpu-dry-run (cpu)", datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        platform.node(), carry_mib(args.carry), args.seconds)
    lines = [header, "%-20s %-8s %8s  %s" % ("step", "result", "seconds", "key figures")]
    lines += ["%-20s %-8s %8.1f  %s" % (s["step"], s["result"], s["seconds"], s["key_figures"]) for s in steps]
    lines.append("%d passed, %d skipped, %d failed, %d not run" % (passed, skipped, failed, not_run))
    os.makedirs(args.out, exist_ok=True)
    write(os.path.join(args.out, "summary.txt"), "\n".join(lines) + "\n")
    write(os.path.join(args.out, "summary.json"), json.dumps(
        {"header": header, "mode": args.mode, "seconds": float(args.seconds), "passed": passed, "skipped": skipped,
         "failed": failed, "not_run": not_run, "steps": steps, "figures": figures}, indent=1))
    return 0 if passed + skipped == len(steps) else 1


if __name__ == "__main__":
    sys.exit(main())
