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
sys.path.insert(0, os.path.join(HERE, ".."))
from prerequisite import missing, requires  # noqa: E402,F401
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
    whole class, reached with the real CLI (cls.gpubox) or gpubox.connect(cls.id). Its kernel's
    config is cls.kernel_config (none by default)."""

    kernel_config = {"enabled": False}

    @classmethod
    def setUpClass(cls):
        if not os.path.exists(MODELD):
            missing("no gpubox-modeld at %s (built only with the venv's torch)" % MODELD)
        cls.refs = fixture()
        # Beside the models, which the sandbox sees (it has a /tmp of its own).
        cls.scratch = tempfile.mkdtemp(prefix="cli-", dir=FIXTURE)
        cls.state = tempfile.mkdtemp(prefix="gpubox-model-cli-")  # short: the agent's socket path lies under it
        os.environ["XDG_STATE_HOME"] = cls.state  # where gpubox.connect finds the CLI's records too
        cls.env = dict(os.environ, GPUBOX_AGENT=AGENT)
        config = os.path.join(cls.scratch, "config.json")
        # modeld beside the agent, found as a user's would be; the models at
        # their own paths, which a checkout under /root or /home would hide.
        with open(config, "w") as f:
            json.dump({"model_host": {"models": [{"name": "tiny", "path": cls.refs["llama"]}]},
                       "kernel": cls.kernel_config}, f)
        created = cls.gpubox("create", "--config", config, "--mount", FIXTURE + ":" + FIXTURE + ":ro")
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
            missing("no gpubox-modeld at %s (built only with the venv's torch)" % MODELD)
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


NOTEBOOK_HOOK = "blocks.0.hook_resid_post"


def notebook_cell(refs):
    """A cell that, through gpubox.Client() (the agent's own package), captures NOTEBOOK_HOOK
    from the model host's "tiny", generates greedily, and again steered by a vector of 0.5s
    at 8x; it prints what it got as one line of JSON."""
    ids, steps = refs["generate_ids"], refs["new_tokens"]
    return """
import gpubox, json
m = gpubox.Client().model("tiny")
act = m.run(ids=%r, capture=[%r])[%r]
plain = m.generate(%r, max_new_tokens=%d, ignore_eos=True)["tokens"]
steered = m.generate(%r, max_new_tokens=%d, ignore_eos=True, add={%r: (act[0, -1] * 0 + 0.5, 8.0)})["tokens"]
print(json.dumps({"file": gpubox.__file__, "transport": type(m.client._socket).__name__, "shape": list(act.shape),
                  "act": act.flatten().tolist(), "plain": plain, "steered": steered}))
""" % (ids, NOTEBOOK_HOOK, NOTEBOOK_HOOK, ids, steps, ids, steps, NOTEBOOK_HOOK)


def check_notebook_cell(test, got, model, refs):
    """What notebook_cell printed (got) equals what a remote caller gets from `model` (a
    gpubox Model of the same sandbox's "tiny"): the capture bit for bit, the greedy tokens
    transformers' own, the steered ones the same and different."""
    import numpy as np
    ids, steps = refs["generate_ids"], refs["new_tokens"]
    test.assertEqual(got["file"], "<gpubox>/__init__.py")  # the agent's own copy of the package
    theirs = np.asarray(model.run(ids=ids, capture=[NOTEBOOK_HOOK])[NOTEBOOK_HOOK])
    test.assertEqual(got["shape"], list(theirs.shape))
    np.testing.assert_array_equal(np.asarray(got["act"], dtype=theirs.dtype).reshape(theirs.shape), theirs)
    vector = np.full(theirs.shape[-1], 0.5, dtype=np.float32)
    steered = model.generate(ids, max_new_tokens=steps, ignore_eos=True, add={NOTEBOOK_HOOK: (vector, 8.0)})["tokens"]
    test.assertEqual(got["plain"], refs["greedy"])
    test.assertEqual(got["steered"], steered)
    test.assertNotEqual(got["steered"], got["plain"])
