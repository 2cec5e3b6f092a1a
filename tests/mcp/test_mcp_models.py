"""The model tools of `gpubox mcp` (list_models, model_hooks, tokenize, generate, run_model,
sae_top_features with an SAE the sandbox config loads with the model) through the
official MCP Python SDK (build/venv/bin/python), in a sandbox that the
create_sandbox tool makes with a model_host config, whose real gpubox-modeld
serves the tiny random Llama of tests/python_models/make_fixture.py
(GPUBOX_MODEL_FIXTURE, the CTest fixture model_client_models). Greedy tokens
are compared with transformers' own (refs.json)."""

import asyncio
import json
import os
import shutil
import subprocess
import tempfile
import unittest

from mcp import Client, StdioServerParameters

from mcp_harness import AGENT, CLI, become_subreaper, reap_orphans, requires

FIXTURE = os.environ.get("GPUBOX_MODEL_FIXTURE", "")
MODELD = os.environ.get("GPUBOX_MODELD", "")


def write_sae(path):
    """A random 32-feature standard SAE on blocks.0.hook_resid_post in SAELens' on-disk format."""
    import numpy as np
    from safetensors.numpy import save_file
    os.makedirs(path)
    rng = np.random.default_rng(3)
    save_file({"W_enc": rng.standard_normal((64, 32)).astype(np.float32), "b_enc": np.full(32, 0.5, np.float32),
               "W_dec": rng.standard_normal((32, 64)).astype(np.float32), "b_dec": np.zeros(64, np.float32)},
              os.path.join(path, "sae_weights.safetensors"))
    with open(os.path.join(path, "cfg.json"), "w") as f:
        json.dump({"architecture": "standard", "d_in": 64, "d_sae": 32, "metadata": {"hook_name": "blocks.0.hook_resid_post"}}, f)
    return path


def setUpModule():
    become_subreaper()


@requires(FIXTURE and os.path.exists(os.path.join(FIXTURE, "refs.json")) and os.path.exists(MODELD),
                     "needs the model fixture (ctest fixture model_client_models) and gpubox-modeld")
class ModelToolsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(os.path.join(FIXTURE, "refs.json")) as f:
            cls.refs = json.load(f)
        cls.state = tempfile.mkdtemp(prefix="gpubox-mcp-model-")
        cls.params = StdioServerParameters(command=CLI, args=["mcp"], env={"XDG_STATE_HOME": cls.state, "GPUBOX_AGENT": AGENT,
                                                                          "PATH": os.environ.get("PATH", "")})

    @classmethod
    def tearDownClass(cls):
        subprocess.run([CLI, "terminate", "--all"], env=dict(os.environ, XDG_STATE_HOME=cls.state), capture_output=True)
        reap_orphans()
        shutil.rmtree(cls.state, ignore_errors=True)

    def test_tokenize_generate_run_model(self):
        # modeld beside the agent; the model where any sandbox sees it, wherever the checkout lies
        # (/tmp and /var/tmp are each sandbox's own).
        os.makedirs("/var/lib/gpubox-test", exist_ok=True)
        visible = tempfile.mkdtemp(prefix="gpubox-mcp-model-", dir="/var/lib/gpubox-test")
        self.addCleanup(shutil.rmtree, visible, ignore_errors=True)
        model = shutil.copytree(self.refs["llama"], os.path.join(visible, "llama"))
        sae = write_sae(os.path.join(visible, "sae"))
        config = {"model_host": {"models": [{"name": "tiny", "path": model, "saes": [{"name": "res0", "path": sae}]}]},
                  "kernel": {"enabled": False}}

        async def body():
            async with Client(self.params) as client:
                created = await client.call_tool("create_sandbox", {"name": "models", "config": config})
                self.assertFalse(created.is_error, created.structured_content)
                box = {"sandbox_id": "models"}
                # Straight after create the model is still loading: generate waits for it, as the CLI does.
                text = await client.call_tool("generate", {**box, "model": "tiny", "prompt": "Hel", "max_new_tokens": 4})
                tokens = await client.call_tool("tokenize", {**box, "model": "tiny", "text": "Hello",
                                                             "add_special_tokens": False})
                generated = await client.call_tool("generate", {**box, "model": "tiny", "ids": self.refs["generate_ids"],
                                                                "max_new_tokens": self.refs["new_tokens"], "ignore_eos": True})
                ran = await client.call_tool("run_model", {**box, "model": "tiny", "text": "Hello",
                                                           "captures": ["blocks.0.hook_resid_post"]})
                unknown = await client.call_tool("run_model", {**box, "model": "tiny", "text": "Hello",
                                                               "captures": ["blocks.99.nothing"]})
                features = await client.call_tool("sae_top_features", {**box, "model": "tiny", "sae": "res0", "text": "Hello",
                                                                       "top_k": 3})
                no_sae = await client.call_tool("sae_top_features", {**box, "model": "tiny", "sae": "nope", "text": "Hello"})
                gpu = await client.call_tool("gpu_status", box)
                listed = await client.call_tool("list_models", box)
                hooks = await client.call_tool("model_hooks", {**box, "model": "tiny"})
                no_model = await client.call_tool("model_hooks", {**box, "model": "nope"})
                await client.call_tool("terminate_sandbox", box)
                self.assertFalse(text.is_error, text.structured_content)
                self.assertIsInstance(text.structured_content["text"], str)
                self.assertFalse(listed.is_error, listed.structured_content)
                (tiny,) = listed.structured_content["models"]
                self.assertEqual((tiny["name"], tiny["state"], tiny["architecture"]), ("tiny", "ready", "llama"))
                self.assertFalse(hooks.is_error, hooks.structured_content)
                points = {h["name"]: h["shape"] for h in hooks.structured_content["hooks"]}
                self.assertEqual(hooks.structured_content["count"], len(points))
                self.assertEqual(tiny["hook_points"], len(points))
                self.assertEqual(points["blocks.0.hook_resid_post"], ["batch", "pos", 64])
                self.assertTrue(no_model.is_error)
                self.assertIn("nope", no_model.structured_content["error"])
                self.assertFalse(features.is_error, features.structured_content)
                positions = features.structured_content["positions"]
                self.assertEqual([p["position"] for p in positions], list(range(5)))  # "Hello": 5 byte tokens
                for p in positions:
                    acts = [f["activation"] for f in p["features"]]
                    self.assertEqual(len(acts), 3)
                    self.assertEqual(acts, sorted(acts, reverse=True))
                    self.assertTrue(all(0 <= f["feature"] < 32 for f in p["features"]))
                    self.assertGreater(acts[0], 0)
                self.assertTrue(no_sae.is_error)
                self.assertIn('no SAE "nope"', no_sae.structured_content["error"])
                return tokens, generated, ran, unknown, gpu
        tokens, generated, ran, unknown, gpu = asyncio.run(asyncio.wait_for(body(), 300))
        self.assertFalse(tokens.is_error, tokens.structured_content)
        self.assertEqual(tokens.structured_content["ids"], [72, 101, 108, 108, 111])
        self.assertFalse(generated.is_error, generated.structured_content)
        self.assertEqual(generated.structured_content["tokens"], self.refs["greedy"])
        self.assertFalse(ran.is_error, ran.structured_content)
        tensors = {t["name"]: t for t in ran.structured_content["tensors"]}
        self.assertEqual(set(tensors), {"logits", "blocks.0.hook_resid_post"})
        capture = tensors["blocks.0.hook_resid_post"]
        self.assertEqual(capture["dtype"], "float32")
        self.assertEqual(capture["shape"][:2], tensors["logits"]["shape"][:2])  # one row, every position
        self.assertEqual(tensors["logits"]["shape"][2], 320)  # the tiny Llama's vocabulary
        self.assertIn("mean", tensors["logits"])  # too many values to inline: a summary
        values = capture.get("values") or capture.get("first_values")
        self.assertTrue(values and all(isinstance(v, float) for v in values))
        self.assertTrue(unknown.is_error)
        self.assertIn("blocks.99.nothing", unknown.structured_content["error"])
        self.assertIn(gpu.structured_content["source"], ("nvml", "nvidia-smi", "none"))


if __name__ == "__main__":
    unittest.main()
