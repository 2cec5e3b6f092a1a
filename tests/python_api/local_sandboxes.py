"""What the Python API tests share: a private CLI state dir (XDG_STATE_HOME), this
process as the subreaper of the agents the CLI detaches (reaped as init would),
and an end that terminates every sandbox the test made."""
import os
import shutil
import sys
import tempfile
import unittest

import gpubox

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from local_children import become_subreaper, reap_orphans  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from prerequisite import missing, requires  # noqa: E402,F401

CLI = os.environ.get("GPUBOX_CLI", "")


def require_root_and_cli():
    if not CLI or os.geteuid() != 0:
        missing("needs GPUBOX_CLI and root (local sandboxes)")


class PrivateState:
    """A fresh CLI state dir for this process; end() terminates what is left and removes it."""

    def __init__(self, prefix):
        become_subreaper()
        self.root = tempfile.mkdtemp(prefix=prefix)
        self._old = os.environ.get("XDG_STATE_HOME")
        os.environ["XDG_STATE_HOME"] = os.path.join(self.root, "state")

    @property
    def store(self):
        return os.path.join(self.root, "state", "gpubox")

    def end(self):
        try:
            if gpubox.sandboxes():
                gpubox.sandbox.run_cli("terminate", "--all")
        finally:
            reap_orphans()
            if self._old is None:
                os.environ.pop("XDG_STATE_HOME", None)
            else:
                os.environ["XDG_STATE_HOME"] = self._old
            shutil.rmtree(self.root, ignore_errors=True)
