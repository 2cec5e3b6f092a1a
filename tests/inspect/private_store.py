"""What the provider's extra tests share: a private gpubox store (XDG_STATE_HOME) per test module,
this process as the subreaper of the agents the CLI detaches, `running()` (what the store has
running), and at the module's end the check that nothing was left running."""

import os
import shutil
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, os.path.join(HERE, ".."))
from local_children import become_subreaper, reap_orphans  # noqa: E402
from prerequisite import missing  # noqa: E402

import gpubox  # noqa: E402
from gpubox.sandbox import run_cli  # noqa: E402

REPO = os.path.dirname(os.path.dirname(HERE))
# A local sandbox hides /root and /home (where a checkout may be): the gpubox package this process runs,
# mounted read-only into a sample's sandbox, and the PYTHONPATH that makes its python3 import it.
PACKAGE_MOUNT = {"/opt/gpubox-python/gpubox": os.path.dirname(os.path.abspath(gpubox.__file__)) + ":ro"}
PACKAGE_ENV = {"PYTHONPATH": "/opt/gpubox-python"}


def running():
    """The ids of the sandboxes the store has running (`gpubox --json ls`)."""
    return [s["id"] for s in run_cli("ls") if s.get("state") == "running"]


@pytest.fixture(scope="module")
def store():
    """A fresh store for the module (its path); afterwards, nothing may be left running in it."""
    if os.geteuid() != 0 or not os.environ.get("GPUBOX_CLI") or not os.environ.get("GPUBOX_AGENT"):
        missing("needs root (local sandboxes), GPUBOX_CLI and GPUBOX_AGENT")
    become_subreaper()
    root = tempfile.mkdtemp(prefix="gpubox-inspect-extras-")
    old = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = root
    try:
        yield root
        left = running()
        assert not left, "sandboxes left running: %s" % left
    finally:
        try:
            if run_cli("ls"):
                run_cli("terminate", "--all")
        finally:
            reap_orphans()
            if old is None:
                os.environ.pop("XDG_STATE_HOME", None)
            else:
                os.environ["XDG_STATE_HOME"] = old
            shutil.rmtree(root, ignore_errors=True)
