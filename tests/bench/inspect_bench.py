"""Inspect evaluations per minute on gpubox sandboxes beside Inspect's own `local` provider: the
tests/inspect/tasks/gpubox_tools.py task (a scripted agent's bash, python and submit per sample),
N samples at once, each provider's median wall time of R runs, then the ratio. A program, not a test:

    build/venv-inspect/bin/python tests/bench/inspect_bench.py [--samples N] [--runs R] [--sleep S]

Needs root (local gpubox sandboxes). Inspect's `docker` provider is measured too when `docker compose`
answers (it needs a daemon and the compose plugin); otherwise the line says why it is left out."""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "inspect"))
os.environ.setdefault("GPUBOX_CLI", os.path.join(ROOT, "build", "bin", "gpubox"))
os.environ.setdefault("GPUBOX_AGENT", os.path.join(ROOT, "build", "bin", "gpubox-agent"))
os.environ["PYTHONPATH"] = os.path.join(ROOT, "python") + os.pathsep + os.environ.get("PYTHONPATH", "")

from eval_run import become_subreaper, listed, private_env, run_eval  # noqa: E402

from inspect_ai.log import read_eval_log  # noqa: E402


def docker_missing():
    """Why Inspect's docker provider cannot run here, or None when it can."""
    if shutil.which("docker") is None:
        return "no docker CLI"
    compose = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True)
    if compose.returncode != 0:
        return "`docker compose` fails (%s)" % (compose.stderr or compose.stdout).strip().splitlines()[0]
    info = subprocess.run(["docker", "info"], capture_output=True, text=True)
    if info.returncode != 0:
        return "no docker daemon (%s)" % info.stderr.strip().splitlines()[-1]
    return None


def samples_per_minute(sandbox, samples, runs, sleep):
    """The median of runs evals' samples/minute, each checked: every sample C, no gpubox sandbox left."""
    rates = []
    for _ in range(runs):
        root = tempfile.mkdtemp(prefix="inspect-bench-")
        try:
            env = private_env(os.path.join(root, "state"))
            run = run_eval(env, sandbox=sandbox, samples=samples, sleep=sleep)
            log = read_eval_log(run.log) if run.log else None
            scored = [s for s in (log.samples if log else []) if s.scores and
                      s.scores["reversed_token"].value == "C"]
            if run.returncode != 0 or len(scored) != samples or listed(env):
                raise SystemExit("%s: the eval failed (%d of %d samples C):\n%s"
                                 % (sandbox, len(scored), samples, run.output[-3000:]))
            rates.append(samples * 60 / run.seconds)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return statistics.median(rates), min(rates), max(rates)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sleep", type=float, default=0, help="seconds each sample's bash step sleeps")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root: the gpubox provider's local sandboxes")
    become_subreaper()
    print("inspect eval gpubox_tools: %d samples at once, %d runs each (median [min, max]), sleep %g s"
          % (args.samples, args.runs, args.sleep))
    rates = {}
    why_not_docker = docker_missing()
    for sandbox in ["gpubox", "local"] + ([] if why_not_docker else ["docker"]):
        rates[sandbox] = samples_per_minute(sandbox, args.samples, args.runs, args.sleep)
        print("  %-7s %7.0f samples/min  [%.0f, %.0f]" % ((sandbox,) + rates[sandbox]))
    if why_not_docker:
        print("  docker  left out: %s" % why_not_docker)
    for other in [s for s in rates if s != "gpubox"]:
        print("ratio gpubox/%s (samples/min, median): %.2f" % (other, rates["gpubox"][0] / rates[other][0]))


if __name__ == "__main__":
    main()
