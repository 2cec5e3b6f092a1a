"""gpubox.connect(ID_OR_NAME): a connected Client for a sandbox the real CLI created.

Run by ctest (cli_python_connect) with Debian's /usr/bin/python3; needs root,
GPUBOX_CLI and GPUBOX_AGENT naming the binaries, PYTHONPATH=python.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from local_children import become_subreaper, reap_orphans  # noqa: E402
import gpubox  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from prerequisite import requires  # noqa: E402

CLI = os.environ.get("GPUBOX_CLI", "")


def setUpModule():
    # The agents the CLI detaches are reparented here and reaped in tearDown,
    # as init would reap them.
    become_subreaper()



@requires(CLI and os.geteuid() == 0, "needs GPUBOX_CLI and root")
class ConnectTest(unittest.TestCase):
    def setUp(self):
        self.state = tempfile.mkdtemp(prefix="gpubox-py-state-")
        self.env = dict(os.environ, XDG_STATE_HOME=self.state)
        self._old = os.environ.get("XDG_STATE_HOME")
        os.environ["XDG_STATE_HOME"] = self.state

    def tearDown(self):
        done = self.cli("terminate", "--all")
        if self._old is None:
            del os.environ["XDG_STATE_HOME"]
        else:
            os.environ["XDG_STATE_HOME"] = self._old
        reap_orphans()
        shutil.rmtree(self.state, ignore_errors=True)
        self.assertEqual(done.returncode, 0, done.stderr)

    def cli(self, *args):
        return subprocess.run([CLI, *args], env=self.env, capture_output=True, text=True, timeout=60)

    def test_connect_by_name_id_and_prefix(self):
        created = self.cli("--json", "create", "--name", "py-box")
        self.assertEqual(created.returncode, 0, created.stderr)
        sandbox_id = json.loads(created.stdout)["id"]
        for key in ("py-box", sandbox_id, sandbox_id[:5]):
            with gpubox.connect(key) as client:
                out = client.call("proc.exec", argv=["hostname"])
                self.assertEqual(out["stdout"], b"py-box\n")
                self.assertEqual(out["exit_code"], 0)
        self.assertEqual([r["id"] for r in gpubox.sandboxes()], [sandbox_id])
        self.assertEqual(gpubox.sandboxes()[0]["state"], "running")

    def test_unknown_and_dead_sandboxes(self):
        with self.assertRaisesRegex(LookupError, "no sandbox with id or name 'nope'"):
            gpubox.connect("nope")
        created = self.cli("create", "--name", "doomed")
        self.assertEqual(created.returncode, 0, created.stderr)
        with gpubox.connect("doomed") as client:
            client.call("sys.shutdown")
        # The agent exits once it has answered; connect then reports it dead.
        for _ in range(200):
            if gpubox.find("doomed")["state"] == "dead":
                break
            time.sleep(0.01)
        with self.assertRaises(gpubox.RpcError) as raised:
            gpubox.connect("doomed")
        self.assertEqual(raised.exception.code, "unavailable")
        self.assertIn("dead", raised.exception.message)


if __name__ == "__main__":
    unittest.main()
