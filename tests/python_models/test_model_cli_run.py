"""`gpubox model ID run NAME PROMPT --capture HOOK... --out FILE.safetensors`
(host/cli/model.cpp, model/weights/safetensors_writer.cpp): the real CLI against
a real local sandbox running gpubox-modeld; the file it writes is read back
with Hugging Face's safetensors library (the independent reader) and compared
with the same captures through the Python client's model.run, bit for bit.
Interpreter: build/venv/bin/python (torch, safetensors from PyPI)."""
import json
import os

import torch
from safetensors import safe_open

import gpubox
from model_harness import ModelSandboxTestCase

HOOKS = ["blocks.0.hook_resid_post", "blocks.1.attn.hook_pattern", "ln_final.hook_normalized"]


class ModelCliRunTest(ModelSandboxTestCase):
    def test_captures_written_to_safetensors_equal_model_run(self):
        out = os.path.join(self.scratch, "captures.safetensors")
        args = ["model", self.id, "run", "tiny", "--ids", "5,17,33,2,9"]
        for hook in HOOKS:
            args += ["--capture", hook]
        run = self.gpubox(*args, "--out", out)
        self.assertEqual(run.returncode, 0, run.stderr)
        printed = run.stdout.splitlines()
        self.assertEqual(printed[0].split()[0], "logits")
        self.assertEqual([line.split()[0] for line in printed[1:]], HOOKS)
        self.assertIn("[1,4,5,5]", printed[2])
        with gpubox.connect(self.id) as client:
            want = client.model("tiny").run(ids=[5, 17, 33, 2, 9], capture=HOOKS)
        with safe_open(out, "pt") as f:
            self.assertEqual(sorted(f.keys()), sorted(HOOKS))
            self.assertEqual(f.metadata()["model"], "tiny")
            for hook in HOOKS:
                torch.testing.assert_close(f.get_tensor(hook), want[hook], rtol=0, atol=0)

    def test_captured_logits_are_listed_once_and_written_to_the_file(self):
        out = os.path.join(self.scratch, "with-logits.safetensors")
        run = self.gpubox("model", self.id, "run", "tiny", "--ids", "5,17,33", "--capture", "logits",
                          "--capture", "blocks.1.hook_resid_post", "--out", out)
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertEqual([line.split()[0] for line in run.stdout.splitlines()], ["logits", "blocks.1.hook_resid_post"])
        with gpubox.connect(self.id) as client:
            want = client.model("tiny").run(ids=[5, 17, 33], capture=["blocks.1.hook_resid_post"])
        with safe_open(out, "pt") as f:
            self.assertEqual(sorted(f.keys()), ["blocks.1.hook_resid_post", "logits"])
            torch.testing.assert_close(f.get_tensor("logits"), want["logits"], rtol=0, atol=0)
            torch.testing.assert_close(f.get_tensor("blocks.1.hook_resid_post"), want["blocks.1.hook_resid_post"], rtol=0, atol=0)

    def test_json_and_refusals(self):
        run = self.gpubox("model", self.id, "run", "tiny", "--ids", "1,2,3", "--capture", "hook_embed", "--json")
        self.assertEqual(run.returncode, 0, run.stderr)
        shown = json.loads(run.stdout)
        self.assertEqual([t["name"] for t in shown["tensors"]], ["logits", "hook_embed"])
        self.assertEqual(shown["tensors"][1]["shape"], [1, 3, 64])
        cases = [(["run", "tiny", "--ids", "1,2"], "`gpubox model ID hooks tiny` lists the hooks"),
                 (["run", "tiny", "--ids", "1,2", "--capture", "hook_embed", "--capture", "hook_embed"], "given twice"),
                 (["run", "tiny", "--ids", "1,2", "--capture", "blocks.9.hook_resid_post"], "blocks.9.hook_resid_post")]
        for args, words in cases:
            with self.subTest(args=args):
                out = os.path.join(self.scratch, "refused.safetensors")
                run = self.gpubox("model", self.id, *args, "--out", out)
                self.assertEqual(run.returncode, 2, run.stderr)
                self.assertIn(words, run.stderr)
                self.assertFalse(os.path.exists(out))
