"""gpubox-modeld and torch inside the sandbox image, for real: `gpubox create
--backend podman` of image/Dockerfile built on the CUDA + PyTorch stand-in
(PyPI's torch in a venv, the Dockerfile's PYTHON_PACKAGES installed by its pip
stage from the wheelhouse, MODELD_FROM=context), with the model fixture's tiny
Llama mounted read-only. Through the container's published port and CURVE:
the image's own gpubox-modeld serves it with logits and a greedy generation
equal to transformers' on the host (the independent reference; 1e-4 relative,
as every modeld test), the kernel imports the image's torch and
transformers, and a cell drives the same model host with gpubox.Client().
SandboxConfig.model_host does the same through Sandbox.start() on podman. Interpreter: Debian's /usr/bin/python3 (numpy; the client
needs no torch)."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python_models"))
from model_harness import CLI, FIXTURE, check_notebook_cell, fixture, missing, notebook_cell  # noqa: E402
import gpubox  # noqa: E402

IMAGE = "localhost/gpubox-test-python:" + (os.environ.get("GPUBOX_TEST_IMAGE_VERSION") or "latest")


class ModelInImageTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if subprocess.run(["podman", "image", "exists", IMAGE]).returncode != 0:
            missing("no %s (podman cannot run here: build_test_images says why)" % IMAGE)
        cls.refs = fixture()
        cls.state = tempfile.mkdtemp(prefix="gpubox-image-model-")
        os.environ["XDG_STATE_HOME"] = cls.state  # the CLI's records, where gpubox.connect finds them
        cls.env = dict(os.environ)
        config = os.path.join(cls.state, "config.json")
        with open(config, "w") as f:
            json.dump({"model_host": {"models": [{"name": "tiny", "path": "/models/tiny"}]}}, f)
        created = cls.gpubox("create", "--backend", "podman", "--image", IMAGE, "--config", config,
                             "--mount", cls.refs["llama"] + ":/models/tiny:ro", timeout=180)
        if created.returncode != 0:
            raise AssertionError("gpubox create failed: %s" % created.stderr)
        cls.id = created.stdout.strip()
        cls.client = gpubox.connect(cls.id)
        cls.model = cls.client.model("tiny")
        cls.model.wait_ready(timeout=120)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.gpubox("terminate", cls.id)
        shutil.rmtree(cls.state, ignore_errors=True)

    @classmethod
    def gpubox(cls, *args, timeout=120):
        return subprocess.run([CLI, *args], env=cls.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=timeout)

    def test_the_images_own_model_host_serves_the_model(self):
        host = self.client.call("sys.info")["model_host"]
        self.assertEqual(host["state"], "running", host)
        exe = self.gpubox("exec", self.id, "--", "readlink", "/proc/%d/exe" % host["pid"])
        self.assertEqual(exe.stdout.strip(), "/usr/local/bin/gpubox-modeld", exe.stderr)
        maps = self.gpubox("exec", self.id, "--", "cat", "/proc/%d/maps" % host["pid"]).stdout
        self.assertIn("/opt/python/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so", maps)

    def test_logits_equal_transformers_on_the_host(self):
        ids = self.refs["prompt_ids"][0]
        logits = np.asarray(self.model.forward(ids=ids)["logits"])[0]
        expected = np.load(os.path.join(FIXTURE, "logits0.npy"))
        np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())

    def test_greedy_generation_equals_transformers(self):
        ids = ",".join(str(i) for i in self.refs["generate_ids"])
        run = self.gpubox("model", self.id, "generate", "tiny", "--ids", ids, "--max-new-tokens",
                          str(self.refs["new_tokens"]), "--ignore-eos", "--json")
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertEqual(json.loads(run.stdout)["tokens"], self.refs["greedy"])

    def test_the_kernel_has_the_images_torch_and_transformers(self):
        run = self.gpubox("run-code", self.id, "import torch, transformers, matplotlib, peft\n"
                          "print(torch.__version__, transformers.__version__, torch.ones(3).sum().item())",
                          timeout=180)
        self.assertEqual(run.returncode, 0, run.stderr)
        with open(os.path.join(HERE, "python-standin.lock")) as f:
            pins = dict(line.strip().split("==") for line in f if "==" in line)
        torch_version, transformers_version, total = run.stdout.split()
        self.assertEqual(torch_version.split("+")[0], pins["torch"])  # the wheel's is "2.11.0+cu130"
        self.assertEqual(transformers_version, pins["transformers"])
        self.assertEqual(total, "3.0")

    def test_a_cell_drives_the_same_model_host(self):
        run = self.gpubox("run-code", self.id, notebook_cell(self.refs), timeout=180)
        self.assertEqual(run.returncode, 0, run.stderr)
        check_notebook_cell(self, json.loads(run.stdout.splitlines()[-1]), self.model, self.refs)

    def test_sandbox_start_hosts_a_model_on_podman(self):
        config = gpubox.SandboxConfig(backend="podman", image=IMAGE, timeout=600,
                                      model_host=[gpubox.HostedModel("tiny", self.refs["llama"])])
        with gpubox.Sandbox(config) as sandbox:
            model = sandbox.model("tiny")
            model.wait_ready(timeout=120)
            out = model.generate(self.refs["generate_ids"], max_new_tokens=self.refs["new_tokens"], ignore_eos=True)
            self.assertEqual(out["tokens"], self.refs["greedy"])
            self.assertIn("config.json", sandbox.exec(["ls", "/gpubox/hosted/h0"]).stdout)


if __name__ == "__main__":
    unittest.main()
