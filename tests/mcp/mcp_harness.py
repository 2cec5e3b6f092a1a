"""What the gpubox mcp tests share: a state dir of their own, a real local
sandbox made with the real CLI (one per test class), and the environment a
`gpubox mcp` child needs. Any Python 3 (Debian's or the venv's)."""

import json
import os
import shutil
import subprocess
import sys
import tempfile

CLI = os.environ.get("GPUBOX_CLI", "")
AGENT = os.environ.get("GPUBOX_AGENT", "")
DEBIAN_PYTHON = "/usr/bin/python3"
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from local_children import become_subreaper, reap_orphans  # noqa: E402,F401
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from prerequisite import missing, requires  # noqa: E402,F401


class SandboxHome:
    """A state dir (short: the agent's socket path lies under it) and one sandbox in it."""

    def __init__(self, prefix="gpubox-mcp-", create_args=()):
        self.state = tempfile.mkdtemp(prefix=prefix)
        self.env = dict(os.environ, XDG_STATE_HOME=self.state, GPUBOX_AGENT=AGENT)
        created = self.cli("--json", "create", *create_args)
        if created.returncode != 0:
            raise AssertionError("gpubox create failed: %s %s" % (created.stdout, created.stderr))
        self.id = json.loads(created.stdout)["id"]
        self.notebooks = os.path.join(self.state, "notebooks")

    def cli(self, *args, timeout=120):
        return subprocess.run([CLI, *args], env=self.env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=timeout)

    def box(self):
        for box in json.loads(self.cli("--json", "ls").stdout):
            if box["id"] == self.id:
                return box
        return {}

    def agent_pid(self):
        """PID 1's pid on the host: another number if the agent had died and something else ran."""
        return self.box().get("agent_pid")

    def state_of(self):
        return self.box().get("state")

    def close(self):
        self.cli("terminate", "--all")
        for snapshot in os.listdir(os.path.join(self.state, "gpubox", "snapshots")) if os.path.isdir(
                os.path.join(self.state, "gpubox", "snapshots")) else []:
            self.cli("snapshots", "rm", snapshot)
        reap_orphans()
        shutil.rmtree(self.state, ignore_errors=True)


def validate_notebook(path):
    """nbformat.validate with Debian's nbformat (python3-nbformat); returns the notebook as JSON."""
    check = subprocess.run([DEBIAN_PYTHON, "-c", "import sys, nbformat; nb = nbformat.read(sys.argv[1], as_version=4); "
                            "nbformat.validate(nb); print(nb.nbformat, nb.nbformat_minor)", path],
                           capture_output=True, text=True, timeout=60)
    if check.returncode != 0:
        raise AssertionError("nbformat refused %s: %s" % (path, check.stderr))
    with open(path) as f:
        return json.load(f)
