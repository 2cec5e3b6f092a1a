"""What the Python API tests share: a private CLI state dir (XDG_STATE_HOME), this
process as the subreaper of the agents the CLI detaches (reaped as init would),
and an end that terminates every sandbox the test made."""
import ctypes
import os
import shutil
import tempfile
import unittest

import gpubox

PR_SET_CHILD_SUBREAPER = 36
CLI = os.environ.get("GPUBOX_CLI", "")


def require_root_and_cli():
    if not CLI or os.geteuid() != 0:
        raise unittest.SkipTest("needs GPUBOX_CLI and root (local sandboxes)")


def reap_orphans():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


class PrivateState:
    """A fresh CLI state dir for this process; end() terminates what is left and removes it."""

    def __init__(self, prefix):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
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
