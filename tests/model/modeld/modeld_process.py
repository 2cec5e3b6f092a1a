"""A gpubox-modeld process for a test: started on a private ipc socket with a
modeld.json, reached through the Python client, ended by pid (and, for a
restart, killed by pid and started again on the files it left)."""
import json
import os
import signal
import subprocess
import tempfile
import time

import numpy as np

from gpubox.client import Client

MODELD = os.environ.get("GPUBOX_MODELD", "")


def connect_when_bound(endpoint, process, seconds=60):
    """A Client on ipc endpoint once the modeld process has bound it."""
    deadline = time.monotonic() + seconds
    while not os.path.exists(endpoint[len("ipc://"):]):
        if process.poll() is not None:
            raise RuntimeError("gpubox-modeld exited with status %d" % process.returncode)
        if time.monotonic() > deadline:
            raise RuntimeError("gpubox-modeld did not bind %s" % endpoint)
        time.sleep(0.001)
    return Client(endpoint)


class Modeld:
    def __init__(self, models, directory=None):
        self.dir = directory or tempfile.mkdtemp(prefix="modeld-test-")
        os.makedirs(self.dir, exist_ok=True)
        config = os.path.join(self.dir, "modeld.json")
        with open(config, "w") as f:
            json.dump({"models": models}, f)
        self.config = config
        self.socket = os.path.join(self.dir, "modeld.sock")
        self.log = open(os.path.join(self.dir, "modeld.log"), "w+")
        self.start()

    def start(self):
        """Starts modeld on its models file as it is (after kill(): as the last one left it)."""
        if os.path.exists(self.socket):
            os.unlink(self.socket)  # a killed modeld's; its absence is how the start is seen
        self.process = subprocess.Popen([MODELD, "--endpoint", "ipc://" + self.socket, "--config", self.config],
                                        stdout=self.log, stderr=subprocess.STDOUT)
        try:
            self.client = connect_when_bound("ipc://" + self.socket, self.process, 30)
        except RuntimeError as error:
            raise AssertionError("modeld did not start: %s\n%s" % (error, self.log_text()))

    def kill(self):
        """Ends modeld at once by its pid (SIGKILL: it saves nothing on the way out), as a crash would."""
        self.client.close()
        os.kill(self.process.pid, signal.SIGKILL)
        assert self.process.wait(timeout=30) == -signal.SIGKILL

    def log_text(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def wait_settled(self, timeout=120):
        """Waits until no model is loading; returns modeld.status."""
        deadline = time.monotonic() + timeout
        while True:
            status = self.client.call("modeld.status")
            if all(m["state"] != "loading" for m in status["models"]):
                return status
            if time.monotonic() > deadline:
                raise AssertionError("models still loading: %r" % status)
            time.sleep(0.05)

    def wait_all_ready(self):
        """Waits for the loads; fails naming the models that did not become ready."""
        status = self.wait_settled()
        failed = [m for m in status["models"] if m["state"] != "ready"]
        assert not failed, failed
        return status

    def logits(self, model, ids, **params):
        """model.forward's logits as a float32 numpy array [batch, tokens, vocab]."""
        result = self.client.call("model.forward", model=model, ids=ids, **params)
        (item,) = result["outputs"]
        assert item["name"] == "logits" and item["dtype"] == "float32", item
        return np.frombuffer(item["attachments"][0], dtype=np.float32).reshape(item["shape"]), result

    def close(self):
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)
        self.client.close()
        self.log.close()
