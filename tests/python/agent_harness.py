"""The one place Python tests start a real gpubox-agent (as a plain child).

Used by tests/python, tests/kernel (AgentKernelCase), tests/python_serve,
tests/python_models and tests/bench; C++ tests have tests/support/agent_process.h.
The agent binary is $GPUBOX_AGENT, else build/bin/gpubox-agent of this
checkout. The gpubox package is imported from $PYTHONPATH, else from
python of this checkout.
"""

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
AGENT = os.environ.get("GPUBOX_AGENT") or os.path.join(REPO, "build", "bin", "gpubox-agent")

try:
    import gpubox  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.join(REPO, "python"))
    import gpubox  # noqa: F401


def keygen_with_agent():
    """A key pair from `gpubox-agent keygen`: (public, secret)."""
    out = subprocess.run([AGENT, "keygen"], check=True, stdout=subprocess.PIPE, timeout=10).stdout
    keys = json.loads(out)
    return keys["public_key"], keys["secret_key"]


class Agent:
    """One gpubox-agent process with its own state directory.

    `rpc` is the config's "rpc" object (None: the default, ipc only);
    "{state_dir}" in it stands for the agent's state directory; `config`
    holds further top-level sections (model_host, kernel, ...)."""

    def __init__(self, rpc=None, log_level="warn", config=None):
        self.dir = tempfile.mkdtemp(prefix="gpubox-py-")
        self.ipc = "ipc://%s/rpc.sock" % self.dir
        args = [AGENT, "--state-dir", self.dir, "--log-level", log_level]
        if rpc is not None or config is not None:
            config_path = os.path.join(self.dir, "config.json")
            with open(config_path, "w") as f:
                full = dict(config or {}, state_dir=self.dir)
                if rpc is not None:
                    full["rpc"] = json.loads(json.dumps(rpc).replace("{state_dir}", self.dir))
                json.dump(full, f)
            args += ["--config", config_path]
        self._stderr = open(os.path.join(self.dir, "stderr.log"), "w+b")
        ready_r, ready_w = os.pipe()
        try:
            self.process = subprocess.Popen(args + ["--ready-fd", str(ready_w)], pass_fds=(ready_w,),
                                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                            stderr=self._stderr)
        finally:
            os.close(ready_w)
        try:
            readable, _, _ = select.select([ready_r], [], [], 10)
            said = os.read(ready_r, 16) if readable else b""
        finally:
            os.close(ready_r)
        if said != b"ready\n":
            self.stop()
            raise RuntimeError("the agent did not get ready (said %r); stderr:\n%s" % (said, self.stderr_text()))

    def stderr_text(self):
        self._stderr.seek(0)
        return self._stderr.read().decode("utf-8", "replace")

    def log_records(self):
        records = []
        with open(os.path.join(self.dir, "agent.log")) as f:
            for line in f:
                records.append(json.loads(line))
        return records

    def endpoints(self):
        """The bound endpoints from the agent's "rpc listening" log line
        (tcp://HOST:0 appears with its real port); needs log level info."""
        for record in self.log_records():
            if record.get("msg") == "rpc listening":
                return record["endpoints"].split()
        raise AssertionError("no 'rpc listening' line in %s/agent.log" % self.dir)

    def tcp_endpoint(self):
        return next(e for e in self.endpoints() if e.startswith("tcp://"))

    def stop(self, timeout=15):
        """SIGTERM, then waits (SIGKILL past timeout); returns the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        self._stderr.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        return code


class AgentTestCase(unittest.TestCase):
    """Starts an agent (ipc only) before each test and stops it after."""

    rpc_config = None
    log_level = "warn"

    def setUp(self):
        self.agent = Agent(self.rpc_config_for_test(), self.log_level)
        self.addCleanup(self.stop_agent)
        self.scratch = tempfile.mkdtemp(prefix="gpubox-py-scratch-")
        self.addCleanup(shutil.rmtree, self.scratch, True)

    def rpc_config_for_test(self):
        return self.rpc_config

    def stop_agent(self):
        self.assertEqual(self.agent.stop(), 0, "the agent should exit 0 on SIGTERM")

    def connect(self, **kwargs):
        client = gpubox.Client(self.agent.ipc, **kwargs)
        self.addCleanup(client.close)
        return client

    def assertRaisesRpc(self, code, function, *args, **kwargs):
        """Runs function, which must raise RpcError `code`; returns it."""
        with self.assertRaises(gpubox.RpcError) as caught:
            function(*args, **kwargs)
        self.assertEqual(caught.exception.code, code, caught.exception.message)
        return caught.exception

    def process_running(self, client, argv):
        """True when a process with exactly this command line is alive (not a zombie)."""
        for process in client.call("proc.list")["processes"]:
            if process["cmdline"] == argv and process["state"] != "Z":
                return True
        return False


def wait_until(predicate, timeout=5.0, interval=0.02):
    give_up = time.monotonic() + timeout
    while time.monotonic() < give_up:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
