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
import sys
import unittest

import numpy as np
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

    def test_a_mounted_model_with_interventions(self):
        # The model and its SAE under this host's /tmp, which a local sandbox does not see: only the mount reaches them.
        hidden = tempfile.mkdtemp(prefix="gpubox-mcp-mounted-", dir="/tmp")
        self.addCleanup(shutil.rmtree, hidden, ignore_errors=True)
        shutil.copytree(self.refs["llama"], os.path.join(hidden, "llama"))
        write_sae(os.path.join(hidden, "sae"))
        saved = os.path.join(hidden, "out")
        os.makedirs(saved)
        hook = "blocks.0.hook_resid_post"
        ones = [1.0] * 64

        async def body():
            async with Client(self.params) as client:
                unmounted = await client.call_tool("create_sandbox", {
                    "name": "unmounted", "models": [{"name": "tiny", "path": os.path.join(hidden, "llama")}]})
                created = await client.call_tool("create_sandbox", {
                    "name": "mounted", "config": {"kernel": {"enabled": False}},
                    "mounts": [{"host": hidden, "sandbox": "/models", "read_only": True}],
                    "models": [{"name": "tiny", "path": "/models/llama", "max_batch": 4,
                                "saes": [{"name": "res0", "path": "/models/sae"}]}]})
                self.assertFalse(created.is_error, created.structured_content)
                box = {"sandbox_id": "mounted", "model": "tiny", "text": "Hello", "captures": [hook], "positions": [-1]}
                plain = await client.call_tool("run_model", box)
                steered = await client.call_tool("run_model", {**box, "ops": [
                    {"op": "add", "hook": hook, "vector": ones, "scale": 2}]})
                sae = await client.call_tool("run_model", {**box, "ops": [
                    {"op": "sae_steer", "sae": "res0", "features": [0], "scale": 1}]})
                # A function of Python's, loaded by name, then named by an op.
                self.load_doubling_fn(client_state=self.state, sandbox="mounted")
                doubled = await client.call_tool("run_model", {**box, "ops": [{"op": "fn", "hook": hook, "fn": "double"}]})
                ragged = await client.call_tool("run_model", {**box, "ops": [{"op": "add", "hook": hook, "vector": [[1, 2], [3]]}]})
                unknown = await client.call_tool("run_model", {**box, "ops": [
                    {"op": "scale", "hook": hook, "factor": 2}, {"op": "zero", "hook": "blocks.0.hook_nothing"}]})
                gen = {"sandbox_id": "mounted", "model": "tiny", "ids": self.refs["generate_ids"], "max_new_tokens": 3,
                       "ignore_eos": True, "captures": [hook], "positions": [-1]}
                gen_plain = await client.call_tool("generate", {**gen, "save_to": os.path.join(saved, "plain.safetensors")})
                gen_steered = await client.call_tool("generate", {**gen, "save_to": os.path.join(saved, "steered.safetensors"),
                                                                  "ops": [{"op": "add", "hook": hook, "vector": ones,
                                                                           "scale": 2, "steps": [0]}]})
                again = await client.call_tool("generate", {**gen, "save_to": os.path.join(saved, "plain.safetensors")})
                await client.call_tool("terminate_sandbox", {"sandbox_id": "mounted"})
                return unmounted, plain, steered, sae, doubled, ragged, unknown, gen_plain, gen_steered, again
        (unmounted, plain, steered, sae, doubled, ragged, unknown, gen_plain, gen_steered,
         again) = asyncio.run(asyncio.wait_for(body(), 300))

        # Without the mount: the model's reason, and the argument that fixes it in this tool's words.
        self.assertTrue(unmounted.is_error)
        message = unmounted.structured_content["error"]
        self.assertIn("model 'tiny' failed to load", message)
        self.assertIn("mounts", message)
        self.assertIn("models_optional", message)
        self.assertNotIn("--", message, "no CLI flag in a tool's refusal")

        def capture(result):
            self.assertFalse(result.is_error, result.structured_content)
            (tensor,) = [t for t in result.structured_content["tensors"] if t["name"] == hook]
            self.assertEqual(tensor["shape"], [1, 1, 64])
            return np.array(tensor["values"], np.float32)
        base = capture(plain)
        np.testing.assert_allclose(capture(steered) - base, 2.0, atol=1e-4)
        rng = np.random.default_rng(3)  # write_sae's W_dec row 0: sae_steer adds it
        rng.standard_normal((64, 32))
        w_dec = rng.standard_normal((32, 64)).astype(np.float32)
        np.testing.assert_allclose(capture(sae) - base, w_dec[0], atol=1e-4)
        np.testing.assert_allclose(capture(doubled), 2 * base, rtol=1e-5, atol=1e-5)
        self.assertTrue(ragged.is_error)
        self.assertIn("ops[0].vector: the nested lists are not all of one shape", ragged.structured_content["error"])
        self.assertTrue(unknown.is_error)
        self.assertIn("ops[1].hook", unknown.structured_content["error"])
        self.assertNotIn("captures[", unknown.structured_content["error"])

        from safetensors.numpy import load_file
        for result in (gen_plain, gen_steered):
            self.assertFalse(result.is_error, result.structured_content)
            self.assertEqual(len(result.structured_content["tokens"]), 3)
            self.assertEqual(result.structured_content["tensors"][0]["name"], hook + "@0")
        plain_file = load_file(os.path.join(saved, "plain.safetensors"))
        steered_file = load_file(os.path.join(saved, "steered.safetensors"))
        self.assertEqual(set(plain_file), {"%s@%d" % (hook, k) for k in range(3)})
        # Pass 0 (the prompt's) is steered; the file holds the whole tensors.
        np.testing.assert_allclose(steered_file[hook + "@0"] - plain_file[hook + "@0"], 2.0, atol=1e-4)
        self.assertEqual(plain_file[hook + "@0"].shape, (1, 1, 64))
        self.assertTrue(again.is_error)
        self.assertIn("save_to: '%s' exists already" % os.path.join(saved, "plain.safetensors"),
                      again.structured_content["error"])
        np.testing.assert_array_equal(load_file(os.path.join(saved, "plain.safetensors"))[hook + "@0"],
                                      plain_file[hook + "@0"])

    def load_doubling_fn(self, client_state, sandbox):
        """model.fn_load, from Python, of fn_example.double as the fixture saved it (TorchScript: act * 2)."""
        code = ("import sys, gpubox\n"
                "with open(sys.argv[2], 'rb') as f:\n"
                "    gpubox.connect(sys.argv[1]).model('tiny').fn_load('double', f.read(), shared=True)\n")
        python = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")
        done = subprocess.run([sys.executable, "-c", code, sandbox, self.refs["double_fn"]], capture_output=True,
                              text=True, timeout=120, env=dict(os.environ, XDG_STATE_HOME=client_state, PYTHONPATH=python))
        if done.returncode != 0:
            raise AssertionError("fn_load failed: %s" % done.stderr)

    def test_a_budgeted_create_names_the_timeout_argument(self):
        state = tempfile.mkdtemp(prefix="gpubox-mcp-budget-")
        self.addCleanup(shutil.rmtree, state, ignore_errors=True)
        prices = os.path.join(state, "prices.txt")
        with open(prices, "w") as f:
            f.write("cpu_core_hour = 0.1\nmemory_gib_hour = 0.01\n")
        env = dict(os.environ, XDG_STATE_HOME=state)
        made = subprocess.run([CLI, "budget", "init", "lab", "--max-usd", "5", "--prices", prices], env=env,
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(made.returncode, 0, made.stderr)
        params = StdioServerParameters(command=CLI, args=["mcp"], env={"XDG_STATE_HOME": state, "GPUBOX_AGENT": AGENT,
                                                                     "PATH": os.environ.get("PATH", "")})

        async def body():
            async with Client(params) as client:
                return await client.call_tool("create_sandbox", {"name": "untimed", "budget": "lab"})
        refused = asyncio.run(asyncio.wait_for(body(), 120))
        self.assertTrue(refused.is_error)
        message = refused.structured_content["error"]
        self.assertIn("timeout", message)
        self.assertNotIn("--", message, "no CLI flag in a tool's refusal")
        self.assertIn("timeout", refused.content[0].text)


if __name__ == "__main__":
    unittest.main()
