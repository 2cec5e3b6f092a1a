"""SandboxConfig.model_host through Sandbox.start() on a real local sandbox: the
tiny random Llama of make_fixture.py, copied to a directory under this host's
/tmp (which a local sandbox does not see: only the mount plan_create makes
reaches it), served by the real gpubox-modeld; sandbox.model(NAME) is the same
Model as gpubox.connect(ID).model(NAME) and generates transformers' greedy
tokens. A model that cannot load fails start() naming it, and ends the sandbox.
README.md's Python example runs as written, on the same model.
Debian's python3 (numpy tensors); needs root."""

import contextlib
import io
import json
import os
import re
import shutil
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python_api"))
from model_harness import MODELD, fixture, missing  # noqa: E402
from local_sandboxes import PrivateState, require_root_and_cli  # noqa: E402
import gpubox  # noqa: E402

README = os.path.join(HERE, "..", "..", "README.md")
README_MODEL_PATH = "/data/llama-3.2-1b"  # the README's stand-in for a model directory of this machine


def readme_python_block():
    """The first python block of README.md's "First five minutes"."""
    with open(README, encoding="utf-8") as f:
        text = f.read()
    section = text[text.index("## First five minutes"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


class SandboxModelHostTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        require_root_and_cli()
        if not os.path.exists(MODELD):
            missing("no gpubox-modeld at %s" % MODELD)
        cls.refs = fixture()
        cls.private = PrivateState("gpubox-py-modelhost-")
        # Under /tmp: a local sandbox has a /tmp of its own, so the model reaches it only through the mount.
        cls.models = tempfile.mkdtemp(prefix="gpubox-py-modelhost-", dir="/tmp")
        cls.tiny = shutil.copytree(cls.refs["llama"], os.path.join(cls.models, "tiny"))

    @classmethod
    def tearDownClass(cls):
        cls.private.end()
        shutil.rmtree(cls.models, ignore_errors=True)

    def test_start_hosts_the_model_and_sandbox_model_serves_it(self):
        config = gpubox.SandboxConfig(timeout=600, model_host=[gpubox.HostedModel("tiny", self.tiny, max_batch=4)])
        with gpubox.Sandbox(config) as sandbox:
            model = sandbox.model("tiny")
            model.wait_ready(timeout=120)
            out = model.generate(self.refs["generate_ids"], max_new_tokens=self.refs["new_tokens"], ignore_eos=True)
            self.assertEqual(out["tokens"], self.refs["greedy"])
            # The same Model as a client of the sandbox's own, on the same loaded weights.
            with gpubox.connect(sandbox.sandbox_id) as client:
                other = client.model("tiny")
                self.assertIs(type(other), type(model))
                self.assertEqual(other.info(), model.info())
            # The sandbox sees the model only where plan_create mounted it.
            seen = sandbox.exec(["ls", self.tiny, "/gpubox/hosted/h0"])
            self.assertIn("config.json", seen.stdout)
            self.assertIn("No such file", seen.stderr)
            host = sandbox.client.call("sys.info")["model_host"]
            self.assertEqual([(m["name"], m["state"]) for m in host["models"]], [("tiny", "ready")])

    def test_the_readme_python_example_runs_as_written(self):
        code = readme_python_block()
        self.assertIn(README_MODEL_PATH, code)
        scope, printed = {}, io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(code.replace(README_MODEL_PATH, self.tiny), "README.md", "exec"), scope)
        with open(os.path.join(self.tiny, "config.json")) as f:  # the sandbox is gone: the model's own config
            d_model = json.load(f)["hidden_size"]
        n = len(scope["ids"])
        self.assertEqual(tuple(scope["out"]["blocks.0.hook_resid_post"].shape), (1, n, d_model))
        self.assertEqual(tuple(scope["direction"].shape), (d_model,))
        self.assertEqual(len(scope["steered"]["tokens"]), 8)
        self.assertIn(str(scope["steered"]["tokens"]), printed.getvalue())

    def test_a_model_that_cannot_load_fails_start_naming_it(self):
        empty = tempfile.mkdtemp(prefix="empty-", dir=self.models)
        config = gpubox.SandboxConfig(timeout=600, model_host=[gpubox.HostedModel("tiny", self.tiny),
                                                               gpubox.HostedModel("broken", empty)])
        sandbox = gpubox.Sandbox(config)
        with self.assertRaises(gpubox.SandboxError) as raised:
            sandbox.start(name="broken-model")
        message = str(raised.exception)
        self.assertIn("model 'broken' failed to load", message)
        self.assertIn("the sandbox was ended", message)
        self.assertNotIn("--models-optional", message, "the Python API's words, not the CLI's flags")
        self.assertIsNone(sandbox.sandbox_id)
        self.assertEqual([b for b in gpubox.sandboxes() if b.get("name") == "broken-model" and b.get("state") != "dead"], [])


if __name__ == "__main__":
    unittest.main()
