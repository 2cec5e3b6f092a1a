"""The model-client tests' fixture: the real agent (tests/python/agent_harness.py)
with the real gpubox-modeld (beside the agent, or $GPUBOX_MODELD) serving a tiny
random Llama that make_fixture.py made with transformers, plus the references
transformers computed on it. The models are made once, into $GPUBOX_MODEL_FIXTURE
(default build/tests/model_client_fixture), by the venv's python ($GPUBOX_VENV_PYTHON,
default build/venv/bin/python)."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from agent_harness import AGENT, REPO, Agent, wait_until  # noqa: E402,F401
import gpubox  # noqa: E402

# Not under /tmp: a local sandbox gets a /tmp of its own, and the CLI tests' modeld runs in one.
FIXTURE = os.environ.get("GPUBOX_MODEL_FIXTURE") or os.path.join(REPO, "build", "tests", "model_client_fixture")
VENV_PYTHON = os.environ.get("GPUBOX_VENV_PYTHON") or os.path.join(REPO, "build", "venv", "bin", "python")
MODELD = os.environ.get("GPUBOX_MODELD") or os.path.join(os.path.dirname(AGENT), "gpubox-modeld")
CLI = os.environ.get("GPUBOX_CLI") or os.path.join(os.path.dirname(AGENT), "gpubox")


def fixture():
    """refs.json's contents, making the models first when they are not there yet."""
    refs = os.path.join(FIXTURE, "refs.json")
    if not os.path.exists(refs):
        subprocess.run([VENV_PYTHON, os.path.join(HERE, "make_fixture.py"), FIXTURE], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600)
    with open(refs) as f:
        return json.load(f)


class ModelSandboxTestCase(unittest.TestCase):
    """One real local sandbox (`gpubox create --config`, a model_host serving "tiny") for the
    whole class, reached with the real CLI (cls.gpubox) or gpubox.connect(cls.id)."""

    @classmethod
    def setUpClass(cls):
        if not os.path.exists(MODELD):
            raise unittest.SkipTest("no gpubox-modeld at %s (built only with the venv's torch)" % MODELD)
        cls.refs = fixture()
        # Beside the models, which the sandbox sees (it has a /tmp of its own).
        cls.scratch = tempfile.mkdtemp(prefix="cli-", dir=FIXTURE)
        cls.state = tempfile.mkdtemp(prefix="gpubox-model-cli-")  # short: the agent's socket path lies under it
        os.environ["XDG_STATE_HOME"] = cls.state  # where gpubox.connect finds the CLI's records too
        cls.env = dict(os.environ, GPUBOX_AGENT=AGENT)
        config = os.path.join(cls.scratch, "config.json")
        with open(config, "w") as f:
            json.dump({"model_host": {"binary": MODELD, "models": [{"name": "tiny", "path": cls.refs["llama"]}]},
                       "kernel": {"enabled": False}}, f)
        created = cls.gpubox("create", "--config", config)
        if created.returncode != 0:
            raise AssertionError("gpubox create failed: %s" % created.stderr)
        cls.id = created.stdout.strip()

    @classmethod
    def tearDownClass(cls):
        cls.gpubox("terminate", cls.id)
        shutil.rmtree(cls.scratch, ignore_errors=True)
        shutil.rmtree(cls.state, ignore_errors=True)

    @classmethod
    def gpubox(cls, *args, timeout=120):
        return subprocess.run([CLI, *args], env=cls.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=timeout)


class ModelHostTestCase(unittest.TestCase):
    """One agent with a model host serving "tiny" for the whole class."""

    @classmethod
    def setUpClass(cls):
        if not os.path.exists(MODELD):
            raise unittest.SkipTest("no gpubox-modeld at %s (built only with the venv's torch)" % MODELD)
        cls.refs = fixture()
        config = {"model_host": {"binary": MODELD, "models": [{"name": "tiny", "path": cls.refs["llama"]}]},
                  "kernel": {"enabled": False}}
        cls.agent = Agent(config=config)
        cls.client = gpubox.Client(cls.agent.ipc)
        cls.client.model("tiny").wait_ready(timeout=60)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.agent.stop()

    def model_host(self):
        return self.client.call("sys.info")["model_host"]
