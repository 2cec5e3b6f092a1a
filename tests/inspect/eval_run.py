"""`inspect eval` of tasks/gpubox_tools.py as a subprocess, for the end-to-end tests and the
benchmark: the command line, a run in a private gpubox state dir, and what it left (its log)."""

import glob
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
# Inspect takes a task file by a relative path only: the commands run in HERE.
TASK = os.path.join("tasks", "gpubox_tools.py")
# The venv's inspect: its python's neighbour (build/venv-inspect/bin), where scripts/setup_python.sh puts it.
INSPECT = os.path.join(os.path.dirname(sys.executable), "inspect")
CLI = os.environ.get("GPUBOX_CLI", os.path.join(ROOT, "build", "bin", "gpubox"))

sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
from local_children import become_subreaper, reap_orphans  # noqa: E402,F401


def eval_command(log_dir: str, sandbox: str = "gpubox", samples: int = 16, sleep: float = 0,
                 extra: Optional[List[str]] = None) -> List[str]:
    """`inspect eval` of the task, to run in HERE: every sample (and sandbox) at once, no live display."""
    return [INSPECT, "eval", TASK, "--model", "mockllm/model", "--sandbox", sandbox,
            "--max-samples", str(samples), "--max-sandboxes", str(samples), "--log-dir", log_dir,
            "--display", "plain", "-T", "samples=%d" % samples, "-T", "sleep=%g" % sleep, *(extra or [])]


def private_env(state_dir: str) -> dict:
    """This environment with XDG_STATE_HOME=state_dir: the CLI's store of sandboxes, this run's alone."""
    env = dict(os.environ, XDG_STATE_HOME=state_dir, PYTHONDONTWRITEBYTECODE="1", PYTHONFAULTHANDLER="1")
    env.setdefault("GPUBOX_CLI", CLI)
    return env


def listed(env: dict) -> list:
    """`gpubox --json ls` in env's store."""
    ran = subprocess.run([CLI, "--json", "ls"], env=env, capture_output=True, text=True, timeout=60, check=True)
    return json.loads(ran.stdout)


def log_path(log_dir: str) -> Optional[str]:
    """The one eval log in log_dir, or None."""
    logs = glob.glob(os.path.join(log_dir, "*.eval"))
    return logs[0] if len(logs) == 1 else None


@dataclass
class EvalRun:
    """One finished `inspect eval`: its exit code, output, wall time and log file (None: none written)."""

    returncode: int
    output: str
    seconds: float
    log: Optional[str]


def run_eval(env: dict, sandbox: str = "gpubox", samples: int = 16, sleep: float = 0,
             extra: Optional[List[str]] = None, timeout: float = 600) -> EvalRun:
    """Runs the eval to its end; the log goes to a fresh directory under env's XDG_STATE_HOME's parent."""
    log_dir = tempfile.mkdtemp(prefix="logs-", dir=os.path.dirname(env["XDG_STATE_HOME"]))
    started = time.monotonic()
    ran = subprocess.run(eval_command(log_dir, sandbox, samples, sleep, extra), env=env, cwd=HERE,
                         capture_output=True, text=True, timeout=timeout)
    seconds = time.monotonic() - started
    reap_orphans()
    return EvalRun(ran.returncode, ran.stdout + ran.stderr, seconds, log_path(log_dir))
