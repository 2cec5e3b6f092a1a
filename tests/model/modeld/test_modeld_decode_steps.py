"""GPU-shaped decoding, checked on the CPU: the static-shape decode step a
CUDA graph captures gives the tokens of the dynamic step for every
architecture (greedy, float32: the same argmax, so equal tokens; a padded
batch too); graphs asked for on a CPU model run eagerly with one log line;
the attention kernel PyTorch picked is reported; and a decode step costs at
most 15 LibTorch ops per layer (`gpubox-modeld --profile-decode`)."""
import json
import os
import subprocess
import unittest

import tiny_models
from gpubox.errors import RpcError
from served_models import ServedTinyModels

ARCHITECTURES = list(tiny_models.configs())
PROMPTS = [[5, 17, 33, 2, 9, 100, 7, 8, 19, 44, 3, 250, 61], [4, 5, 6, 7]]
OPS_PER_LAYER_LIMIT = 15  # the GPU-shaped decoding issue's target, per decode step and layer


class DecodeSteps(ServedTinyModels):
    ARCHITECTURES = ARCHITECTURES
    SEED = 70

    @classmethod
    def extra_models(cls):
        path = cls.models["llama"][0]
        return [{"name": "llama-graphs", "path": path, "cuda_graphs": True}]

    def generate(self, model, ids, steps, **params):
        return self.modeld.client.call("model.generate", model=model, ids=ids, max_new_tokens=24, ignore_eos=True,
                                       decode_steps=steps, **params)["tokens"]

    def test_fixed_steps_give_the_dynamic_steps_tokens_for_every_architecture(self):
        for name in ARCHITECTURES:
            for ids in (PROMPTS[0], PROMPTS):  # one prompt, and a left-padded batch
                with self.subTest(architecture=name, batch=isinstance(ids[0], list)):
                    dynamic = self.generate(name, ids, "dynamic")
                    self.assertEqual(self.generate(name, ids, "fixed"), dynamic)
                    self.assertEqual(self.generate(name, ids, "graph"), dynamic)  # no CUDA: the fixed step, eagerly

    def test_sampling_repeats_with_its_seed_whatever_the_steps(self):
        params = dict(temperature=1.2, top_k=40, seed=11)
        dynamic = self.generate("qwen2", PROMPTS[1], "dynamic", **params)
        self.assertEqual(self.generate("qwen2", PROMPTS[1], "fixed", **params), dynamic)
        self.assertNotEqual(self.generate("qwen2", PROMPTS[1], "dynamic", temperature=1.2, top_k=40, seed=12), dynamic)

    def test_graphs_on_a_cpu_model_run_eagerly_and_say_so_once(self):
        plain = self.generate("llama", PROMPTS[0], "dynamic")
        for _ in range(2):
            self.assertEqual(self.modeld.client.call("model.generate", model="llama-graphs", ids=PROMPTS[0],
                                                     max_new_tokens=24, ignore_eos=True)["tokens"], plain)
        log = self.modeld.log_text()
        self.assertEqual(log.count("CUDA graphs asked for on a cpu model: its decode steps run eagerly"), 1, log)

    def test_a_bad_decode_steps_value_is_refused_by_name(self):
        with self.assertRaises(RpcError) as raised:
            self.generate("llama", PROMPTS[0], "fast")
        self.assertEqual(raised.exception.code, "invalid_request")
        self.assertIn('decode_steps: "fast" is not one of dynamic, fixed, graph', raised.exception.message)

    def test_stats_name_the_attention_kernel_once_passes_ran(self):
        self.generate("mistral", PROMPTS[0], "dynamic")
        stats = self.modeld.client.call("model.stats", model="mistral")
        kernels = {"math", "flash_attention", "efficient_attention", "cudnn_attention", "overrideable"}
        self.assertIn(stats["attention"]["prefill"], kernels)
        self.assertIn(stats["attention"]["decode"], kernels)
        self.assertIn("attention on cpu, decode passes: " + stats["attention"]["decode"], self.modeld.log_text())
        self.generate("mistral", PROMPTS[0], "fixed")
        stats = self.modeld.client.call("model.stats", model="mistral")
        self.assertIn(stats["attention"]["fixed_decode"], kernels)
        self.assertIn("attention on cpu, fixed decode passes: " + stats["attention"]["fixed_decode"],
                      self.modeld.log_text())
        self.assertEqual(stats["batching"]["graphs"], {"captured": 0, "reused": 0})  # no CUDA: no graphs

    def test_info_says_how_many_tokens_the_kv_cache_holds(self):
        model = self.modeld.client.call("model.info", model="qwen2")
        info = model["kv_cache"]
        kv = self.modeld.client.call("model.stats", model="qwen2")["batching"]["kv"]
        self.assertEqual(info["tokens"], kv["blocks"] * kv["block_tokens"])
        self.assertEqual(info["bytes"], kv["bytes"])
        config = tiny_models.configs()["qwen2"][1]
        element = {"float32": 4, "bfloat16": 2, "float16": 2}[model["dtype"]]
        layers_heads_dim = config.num_hidden_layers * config.num_key_value_heads * (
            config.hidden_size // config.num_attention_heads)
        self.assertEqual(info["bytes_per_token"], 2 * layers_heads_dim * element)  # a key and a value per layer
        self.assertEqual(info["bytes"], info["tokens"] * info["bytes_per_token"])
        # The CPU has no GPU budget to split: model.stats says so with no devices.
        self.assertEqual(self.modeld.client.call("model.stats", model="qwen2")["kv_budget"], {"devices": []})


class DecodeOps(unittest.TestCase):
    def test_a_decode_step_costs_at_most_15_ops_per_layer(self):
        import tempfile
        with tempfile.TemporaryDirectory(prefix="modeld-ops-") as directory:
            path, _ = tiny_models.make(directory, "llama", seed=3)
            run = subprocess.run([os.environ["GPUBOX_MODELD"], "--profile-decode", path, "--steps", "8"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
        self.assertEqual(run.returncode, 0, run.stderr)
        profile = json.loads(run.stdout)
        # Ops that do work (views and metadata aside), inside each block's profiler scope.
        per_layer = profile["layer_compute_ops_per_layer"]
        self.assertLessEqual(per_layer, OPS_PER_LAYER_LIMIT, profile["layer_compute_ops"])
        names = dict(profile["layer_compute_ops"])
        self.assertEqual(names.get("aten::rms_norm"), 2, names)  # one op per norm
        self.assertEqual(names.get("aten::scaled_dot_product_attention"), 1, names)
        self.assertGreaterEqual(per_layer, 8, names)  # the products, norms, RoPE, cache writes, attention: counted


if __name__ == "__main__":
    unittest.main()
