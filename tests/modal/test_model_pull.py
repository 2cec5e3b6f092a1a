"""`gpubox model ID pull REPO --volume NAME` on the Modal backend, against the
fake Modal control plane (fake_modal/) and a fake Hugging Face Hub
(fake_hub.py; the real Hub cannot be reached from here) serving a tiny random
Llama that transformers' save_pretrained made. The sandboxes are podman
containers of the test image, whose python3 has huggingface_hub 2.4; a
sandbox created with --network open runs with podman's
slirp4netns:allow_host_loopback=true, so the Hub on the host's 127.0.0.1 is
http://10.0.2.2:PORT in it (HF_ENDPOINT, given with --env at create). The
Modal Volume is a directory on this host, so the test reads what landed.
Interpreter: build/venv's python (modal, torch, transformers)."""

import json
import os
import secrets
import subprocess
import sys
import tempfile
import unittest

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "model", "modeld"))
from fake_hub import FakeHub  # noqa: E402
from modal_harness import IMAGE, ModalTestCase, stop_shared_fake  # noqa: E402

REPO = "tiny-org/tiny-llama"


def tearDownModule():
    stop_shared_fake()


def greedy(model, ids, steps):
    """transformers' own greedy continuation of ids, one argmax at a time (no eos stop)."""
    ids = list(ids)
    with torch.no_grad():
        for _ in range(steps):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[-steps:]


class ModelPullTest(ModalTestCase):
    open_network = "slirp4netns:allow_host_loopback=true"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        import tiny_models
        made = tempfile.mkdtemp(prefix="gpubox-pull-model-", dir=cls.work)
        path, cls.model = tiny_models.make(made, "llama2", seed=7)
        cls.files = {}
        for root, _, names in os.walk(path):
            for name in names:
                with open(os.path.join(root, name), "rb") as f:
                    cls.files[os.path.relpath(os.path.join(root, name), path)] = f.read()
        cls.token = "hf_test_" + secrets.token_hex(16)
        cls.hub = FakeHub({REPO: cls.files}, cls.token).start()
        cls.env = dict(cls.env, HF_TOKEN=cls.token)
        cls.id = cls.create("--network", "open", "--volume", "weights:/weights",
                            "--env", "HF_ENDPOINT=http://10.0.2.2:%d" % cls.hub.port, timeout=300)
        cls.volume = os.path.join(cls.fake.volumes_dir, "weights")

    @classmethod
    def tearDownClass(cls):
        if hasattr(cls, "hub"):
            cls.hub.stop()
        super().tearDownClass()

    @classmethod
    def create(cls, *args, timeout=300):
        ran = subprocess.run([os.environ["GPUBOX_CLI"], "--json", "create", "--backend", "modal", "--image", IMAGE, *args],
                             env=cls.env, capture_output=True, text=True, timeout=timeout)
        if ran.returncode != 0:
            raise AssertionError("gpubox create: %s%s" % (ran.stdout, ran.stderr))
        return json.loads(ran.stdout)["id"]

    def pull(self, *args, timeout=300):
        return self.gpubox("model", self.id, "pull", *args, timeout=timeout)

    def jobs(self):
        return json.loads(self.ok("jobs", self.id, "--json"))

    def test_1_pull_lands_the_files_byte_equal_with_progress(self):
        ran = self.pull(REPO, "--volume", "weights", "--json")
        self.assertEqual(ran.returncode, 0, ran.stdout + ran.stderr)
        result = json.loads(ran.stdout)
        self.assertEqual(result["path"], "/weights/" + REPO)
        self.assertFalse(result["skipped"])
        self.assertEqual(result["commit"], self.hub.commits[REPO])
        self.assertEqual(result["files"], len(self.files))
        self.assertEqual(result["bytes"], sum(len(data) for data in self.files.values()))
        for name, data in self.files.items():
            with open(os.path.join(self.volume, REPO, name), "rb") as f:
                self.assertEqual(f.read(), data, name)
        self.assertIn("%d/%d files" % (len(self.files), len(self.files)), ran.stderr)
        asked = [r for r in self.hub.requests if r[1] != "/api/agent-harnesses"]
        self.assertTrue(asked and all(given for _, _, given in asked), "the token reached the Hub: %s" % asked)
        self.assertTrue(any(path.startswith("/%s/resolve/" % REPO) for _, path, _ in asked), asked)

    def test_2_a_second_pull_is_already_there_without_a_request(self):
        before = self.hub.count()
        ran = self.gpubox("model", "pull", self.id, REPO, "--volume", "weights")  # the spelling
        self.assertEqual(ran.returncode, 0, ran.stdout + ran.stderr)
        self.assertEqual(ran.stdout.strip(), "/weights/" + REPO)
        self.assertIn("already there", ran.stderr)
        self.assertEqual(self.hub.count(), before, self.hub.requests[before:])

    def test_3_the_token_is_in_no_argv_store_log_or_job_record(self):
        self.assertTrue(self.jobs(), "the pulls ran as jobs")
        shown = [self.ok("jobs", self.id, "--json"), self.ok("rpc", self.id, "job.list"), self.ok("info", self.id, "--json")]
        for job in self.jobs():
            self.assertIn("gpubox_pull.py", job["command"])
            shown.append(self.ok("wait", self.id, job["job_id"], "--json"))
            shown.append(self.ok("logs", self.id, job["job_id"]))
            shown.append(self.ok("logs", self.id, job["job_id"], "--stderr"))
        for text in shown:
            self.assertNotIn(self.token, text)
        # Everything the agent wrote (its log, journal, job dirs), the work dir and the volume, in the sandbox.
        grep = self.gpubox("exec", self.id, "--", "grep", "-rIl", "--devices=skip", self.token, "/run/gpubox", "/workspace",
                           "/weights", "/tmp")
        self.assertEqual(grep.returncode, 1, "the token is in: %s%s" % (grep.stdout, grep.stderr))
        container = self.container_of(self.id)
        inspect = subprocess.run(["podman", "inspect", container], capture_output=True, text=True).stdout
        self.assertNotIn(self.token, inspect)
        for root in (os.path.join(self.work, "state"), self.fake.work):
            for folder, _, names in os.walk(root):
                for name in names:
                    path = os.path.join(folder, name)
                    if os.path.isfile(path) and not os.path.islink(path):
                        with open(path, "rb") as f:
                            self.assertNotIn(self.token.encode(), f.read(), path)

    def test_4_a_repo_the_hub_lacks_fails_with_its_404(self):
        ran = self.pull("nobody/missing", "--volume", "weights")
        self.assertEqual(ran.returncode, 1, ran.stdout + ran.stderr)
        self.assertIn("404", ran.stderr)
        self.assertIn("Repository Not Found", ran.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.volume, "nobody", "missing", "config.json")))

    def test_5_an_unknown_volume_is_a_usage_error_and_submits_nothing(self):
        before = len(self.jobs())
        ran = self.pull(REPO, "--volume", "elsewhere")
        self.assertEqual(ran.returncode, 2, ran.stdout + ran.stderr)
        self.assertIn("elsewhere", ran.stderr)
        self.assertIn("weights:/weights", ran.stderr)  # the volumes it has
        for bad in (["--to", "/x", "--volume", "weights"], [], ["--volume", "weights", "--subdir", "../up"]):
            self.assertEqual(self.pull(REPO, *bad).returncode, 2, bad)
        self.assertEqual(self.pull("bad repo name", "--volume", "weights").returncode, 2)
        self.assertEqual(len(self.jobs()), before)

    def test_6_an_adapter_config_counts_as_there(self):
        adapter = os.path.join(self.volume, "adapters", "lora1")
        os.makedirs(adapter)
        with open(os.path.join(adapter, "adapter_config.json"), "w") as f:
            json.dump({"peft_type": "LORA"}, f)
        before = self.hub.count()
        ran = self.pull("some-org/lora1", "--volume", "weights", "--subdir", "adapters/lora1", "--json")
        self.assertEqual(ran.returncode, 0, ran.stdout + ran.stderr)
        result = json.loads(ran.stdout)
        self.assertTrue(result["skipped"])
        self.assertEqual(result["marker"], "adapter_config.json")
        self.assertEqual(result["path"], "/weights/adapters/lora1")
        self.assertEqual(self.hub.count(), before)

    def test_7_a_new_sandbox_on_the_volume_loads_the_pulled_model(self):
        self.assertTrue(os.path.exists(os.path.join(self.volume, REPO, "config.json")), "test_1 pulled it")
        config = os.path.join(self.work, "models.json")
        with open(config, "w") as f:
            json.dump({"model_host": {"models": [{"name": "tiny", "path": "/models/" + REPO}]}}, f)
        other = self.create("--volume", "weights:/models", "--config", config)
        ids = [1, 5, 9, 42]
        ran = self.gpubox("model", other, "generate", "tiny", "--ids", ",".join(map(str, ids)), "--max-new-tokens", "5",
                          "--ignore-eos", "--json", timeout=300)
        self.assertEqual(ran.returncode, 0, ran.stdout + ran.stderr)
        self.assertEqual(json.loads(ran.stdout)["tokens"], greedy(self.model, ids, 5))
        self.ok("terminate", other)


if __name__ == "__main__":
    unittest.main()
