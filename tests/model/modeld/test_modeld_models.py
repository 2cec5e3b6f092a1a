"""gpubox-modeld against Hugging Face transformers on the same checkpoints.

Interpreter: build/venv/bin/python (torch 2.11 and transformers 5.24 from PyPI).
Every architecture's tiny random model (tiny_models.py) is saved with
save_pretrained and loaded by modeld; its logits must match transformers'
forward on the same file within 1e-4 relative in float32 (both run the same
float32 operations; the remaining difference is summation order, ~1e-6) and
within 5e-2 in bfloat16 (bf16 keeps 8 significant bits, 2^-8 relative per
rounding; the two sides round at different points through three layers, and
Gemma 2's soft-capped logits, all within ±3, put one bf16 step at ~0.5 %;
measured up to 3.1e-2), and greedy
generations must be token-equal to transformers' generate().
"""
import copy
import json
import os
import shutil
import struct
import tempfile
import time
import unittest

import numpy as np
import torch
import transformers as tf

import tiny_models
from gpubox.client import RpcError
from modeld_process import Modeld

FP32_TOLERANCE = 1e-4
BF16_TOLERANCE = 5e-2
ARCHITECTURES = list(tiny_models.configs())
PROMPTS = [[5, 17, 33, 2, 9, 100, 7, 8, 19, 44, 3, 250, 61], [4, 5, 6, 7], [300, 12]]


def relative_error(got, want):
    return float(np.abs(got - want).max() / np.abs(want).max())


def legacy_gemma3(path, into):
    """A copy of the Gemma 3 checkpoint at path whose config.json has transformers 4's
    spelling (rope_theta, rope_local_base_freq, rope_scaling, sliding_window_pattern 2:
    layer 1 global), as Gemma 3 configs on the Hub have it."""
    os.makedirs(into)
    for name in os.listdir(path):
        if name != "config.json":
            os.symlink(os.path.join(path, name), os.path.join(into, name))
    with open(os.path.join(path, "config.json")) as f:
        config = json.load(f)
    for key in ("rope_parameters", "layer_types", "_sliding_window_pattern"):
        config.pop(key, None)
    config.update(rope_theta=1e6, rope_local_base_freq=100.0, rope_scaling={"rope_type": "linear", "factor": 8.0},
                  sliding_window_pattern=2)
    with open(os.path.join(into, "config.json"), "w") as f:
        json.dump(config, f)
    return into


class ModeldAgainstTransformers(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="modeld-models-")
        cls.models = {name: tiny_models.make(cls.dir, name, seed=i) for i, name in enumerate(ARCHITECTURES)}
        specs = [{"name": n, "path": p} for n, (p, _) in cls.models.items()]
        specs += [{"name": n + "-bf16", "path": p, "dtype": "bfloat16"} for n, (p, _) in cls.models.items()]
        cls.gemma3_legacy = legacy_gemma3(cls.models["gemma3"][0], os.path.join(cls.dir, "gemma3-legacy"))
        specs.append({"name": "gemma3-legacy", "path": cls.gemma3_legacy})
        cls.modeld = Modeld(specs, os.path.join(cls.dir, "run"))
        cls.modeld.wait_all_ready()

    @classmethod
    def tearDownClass(cls):
        cls.modeld.close()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def reference_logits(self, model, prompt, dtype=torch.float32):
        if dtype != torch.float32:
            model = copy.deepcopy(model).to(dtype)
        with torch.no_grad():
            return model(torch.tensor([prompt])).logits[0].float().numpy()

    def test_float32_logits_match_transformers_for_every_position(self):
        for name in ARCHITECTURES:
            with self.subTest(architecture=name):
                got, result = self.modeld.logits(name, [PROMPTS[0]])
                want = self.reference_logits(self.models[name][1], PROMPTS[0])
                self.assertEqual(got.shape, (1, len(PROMPTS[0]), 320))
                self.assertLess(relative_error(got[0], want), FP32_TOLERANCE)
                self.assertEqual(result["lengths"], [len(PROMPTS[0])])

    def test_the_parameter_count_is_transformers(self):
        for name in ARCHITECTURES:  # norms, biases and a tied head (counted once) included
            with self.subTest(architecture=name):
                info = self.modeld.client.call("model.info", model=name)
                self.assertEqual(info["parameters"], self.models[name][1].num_parameters())

    def test_gemma3_in_transformers_4_spelling_reads_as_transformers_reads_it(self):
        hf = tf.AutoModelForCausalLM.from_pretrained(self.gemma3_legacy).eval()
        self.assertEqual(hf.config.layer_types, ["sliding_attention", "full_attention", "sliding_attention"])
        self.assertEqual(hf.config.rope_parameters["sliding_attention"]["rope_theta"], 100.0)
        got, _ = self.modeld.logits("gemma3-legacy", [PROMPTS[0]])
        want = self.reference_logits(hf, PROMPTS[0])
        self.assertLess(relative_error(got[0], want), FP32_TOLERANCE)
        # The local base differs from the new spelling's file: the same weights must give other logits.
        other, _ = self.modeld.logits("gemma3", [PROMPTS[0]])
        self.assertGreater(relative_error(other[0], want), 1e-3)

    def test_a_left_padded_batch_gives_each_row_its_own_logits(self):
        for name in ARCHITECTURES:
            with self.subTest(architecture=name):
                got, result = self.modeld.logits(name, PROMPTS)
                self.assertEqual(result["padding"], "left")
                for row, prompt in enumerate(PROMPTS):
                    want = self.reference_logits(self.models[name][1], prompt)
                    self.assertLess(relative_error(got[row, -len(prompt):], want), FP32_TOLERANCE, (name, row))

    def test_last_only_returns_the_last_position(self):
        got, _ = self.modeld.logits("llama", PROMPTS, last_only=True)
        full, _ = self.modeld.logits("llama", PROMPTS)
        self.assertEqual(got.shape, (3, 1, 320))
        np.testing.assert_allclose(got[:, 0], full[:, -1], rtol=1e-5, atol=1e-6)

    def test_bfloat16_logits_match_transformers_in_bfloat16(self):
        for name in ARCHITECTURES:
            with self.subTest(architecture=name):
                got, _ = self.modeld.logits(name + "-bf16", [PROMPTS[0]])
                want = self.reference_logits(self.models[name][1], PROMPTS[0], torch.bfloat16)
                self.assertLess(relative_error(got[0], want), BF16_TOLERANCE)
        info = self.modeld.client.call("model.info", model="gemma2-bf16")
        self.assertEqual(info["dtype"], "bfloat16")

    def test_greedy_generation_is_token_equal_to_transformers(self):
        for name in ARCHITECTURES:
            for prompt in PROMPTS[:2]:
                with self.subTest(architecture=name, prompt=len(prompt)):
                    result = self.modeld.client.call("model.generate", model=name, ids=prompt, max_new_tokens=20)
                    with torch.no_grad():
                        want = self.models[name][1].generate(torch.tensor([prompt]), max_new_tokens=20, do_sample=False)
                    want = want[0, len(prompt):].tolist()
                    self.assertEqual(result["tokens"], want)
                    eos = self.models[name][1].generation_config.eos_token_id
                    self.assertEqual(result["finish_reason"], "eos" if want[-1] == eos else "length")

    def test_a_batch_generates_what_each_prompt_generates_alone(self):
        for name in ("llama", "gemma2", "gemma3", "gpt2"):
            with self.subTest(architecture=name):
                batch = self.modeld.client.call("model.generate", model=name, ids=PROMPTS, max_new_tokens=12,
                                                ignore_eos=True)
                for row, prompt in enumerate(PROMPTS):
                    alone = self.modeld.client.call("model.generate", model=name, ids=prompt, max_new_tokens=12,
                                                    ignore_eos=True)
                    self.assertEqual(batch["tokens"][row], alone["tokens"], (name, row))

    def test_eos_from_the_checkpoint_and_stop_ids_end_a_row(self):
        free = self.modeld.client.call("model.generate", model="llama", ids=PROMPTS[0], max_new_tokens=20,
                                       ignore_eos=True)
        stop = free["tokens"][5]
        stopped = self.modeld.client.call("model.generate", model="llama", ids=PROMPTS[0], max_new_tokens=20,
                                          ignore_eos=True, stop_ids=[stop])
        first = free["tokens"].index(stop)
        self.assertEqual(stopped["tokens"], free["tokens"][:first + 1])
        self.assertEqual(stopped["finish_reason"], "stop")
        info = self.modeld.client.call("model.info", model="gemma2")
        self.assertEqual(info["eos_token_ids"], [1])

    def test_sampling_with_a_seed_repeats_and_top_k_1_is_greedy(self):
        params = dict(model="qwen2", ids=PROMPTS[1], max_new_tokens=16, ignore_eos=True, temperature=1.5, top_p=0.9)
        first = self.modeld.client.call("model.generate", seed=7, **params)["tokens"]
        again = self.modeld.client.call("model.generate", seed=7, **params)["tokens"]
        other = self.modeld.client.call("model.generate", seed=8, **params)["tokens"]
        self.assertEqual(first, again)
        self.assertNotEqual(first, other)
        greedy = self.modeld.client.call("model.generate", model="qwen2", ids=PROMPTS[1], max_new_tokens=16,
                                         ignore_eos=True)["tokens"]
        top1 = self.modeld.client.call("model.generate", model="qwen2", ids=PROMPTS[1], max_new_tokens=16,
                                       ignore_eos=True, temperature=0.7, top_k=1, seed=3)["tokens"]
        self.assertEqual(top1, greedy)

    def test_streamed_steps_are_the_result_and_cancel_stops_at_once(self):
        with self.modeld.client.stream("model.generate", model="mistral", ids=PROMPTS[0], max_new_tokens=30,
                                       ignore_eos=True, stream=True) as stream:
            steps = [body["tokens"][0] for body, _ in stream]
            result = stream.result
        self.assertEqual(steps, result["tokens"])
        with self.modeld.client.stream("model.generate", model="mistral", ids=PROMPTS[0], max_new_tokens=100000,
                                       ignore_eos=True, stream=True, window=1) as stream:
            next(stream)
            started = time.monotonic()
            stream.cancel()
            with self.assertRaises(RpcError) as raised:
                stream.result
            self.assertEqual(raised.exception.code, "cancelled")
            self.assertLess(time.monotonic() - started, 5)
        self.assertEqual(len(self.modeld.client.call("model.generate", model="mistral", ids=[1], max_new_tokens=2,
                                                     ignore_eos=True)["tokens"]), 2)

    def test_a_generation_the_context_cuts_says_so(self):
        prompt = list(range(3, 123))  # 120 of gpt2's 128 positions: room for 8 new tokens
        cut = self.modeld.client.call("model.generate", model="gpt2", ids=prompt, max_new_tokens=20, ignore_eos=True)
        self.assertEqual(len(cut["tokens"]), 8)
        self.assertEqual(cut["finish_reason"], "length")
        self.assertEqual(cut["max_new_tokens_cut"], {"asked": 20, "allowed": 8, "context_length": 128})
        whole = self.modeld.client.call("model.generate", model="gpt2", ids=prompt, max_new_tokens=8, ignore_eos=True)
        self.assertNotIn("max_new_tokens_cut", whole)  # asked for what fits: nothing was cut
        self.assertEqual(whole["tokens"], cut["tokens"])

    def test_bad_requests_get_clear_errors_and_modeld_keeps_serving(self):
        cases = [
            (dict(method="model.forward", model="nope", ids=[1]), "not_found", "no model \"nope\""),
            (dict(method="model.forward", model="gpt2", ids=[list(range(129))]), "invalid_request", "context length of 128"),
            (dict(method="model.forward", model="gpt2", ids=[[1, 320]]), "invalid_request", "outside the vocabulary"),
            (dict(method="model.forward", model="gpt2", ids=[[]]), "invalid_request", "empty"),
            (dict(method="model.forward", model="gpt2", text="hi"), "invalid_request", "no tokenizer.json"),
            (dict(method="model.forward", model="gpt2"), "invalid_request", "exactly one of ids, text or messages"),
            (dict(method="model.generate", model="gpt2", ids=[1], max_new_tokens=-1), "invalid_request", "max_new_tokens"),
            (dict(method="model.load", name="x", path=self.models["gpt2"][0], dtype="int8"), "invalid_request", "int8"),
            (dict(method="model.load", name="x", path="relative/dir"), "invalid_request", "absolute"),
            (dict(method="model.load", name="gpt2", path=self.models["gpt2"][0]), "already_exists", "gpt2"),
        ]
        for params, code, words in cases:
            method = params.pop("method")
            with self.subTest(method=method, params=params):
                with self.assertRaises(RpcError) as raised:
                    self.modeld.client.call(method, **params)
                self.assertEqual(raised.exception.code, code)
                self.assertIn(words, raised.exception.message)
        got, _ = self.modeld.logits("gpt2", [[1, 2]])
        self.assertEqual(got.shape, (1, 2, 320))


class ModeldLoading(unittest.TestCase):
    """Broken and hostile model directories: a clear failure, modeld keeps serving."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="modeld-loading-")
        self.good, _ = tiny_models.make(self.dir, "llama")
        self.modeld = Modeld([{"name": "good", "path": self.good}], os.path.join(self.dir, "run"))

    def tearDown(self):
        self.modeld.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def broken_copy(self, name, change):
        path = os.path.join(self.dir, name)
        shutil.copytree(self.good, path)
        change(path)
        return path

    def load_failure(self, name, path, **spec):
        self.modeld.client.call("model.load", name=name, path=path, **spec)
        status = self.modeld.wait_settled()
        (entry,) = [m for m in status["models"] if m["name"] == name]
        self.assertEqual(entry["state"], "failed")
        with self.assertRaises(RpcError) as raised:
            self.modeld.client.call("model.info", model=name)
        self.assertEqual(raised.exception.code, "unavailable")
        return entry["error"]

    def test_broken_directories_fail_with_the_file_and_tensor_named(self):
        def truncate(path):
            with open(os.path.join(path, "model.safetensors"), "r+b") as f:
                f.truncate(os.path.getsize(f.name) // 2)

        def hostile_header(path):
            with open(os.path.join(path, "model.safetensors"), "r+b") as f:
                f.write(struct.pack("<Q", 1 << 62))

        def drop_tensor(path):
            from safetensors.torch import load_file, save_file
            weights = load_file(os.path.join(path, "model.safetensors"))
            del weights["model.layers.1.mlp.up_proj.weight"]
            save_file(weights, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})

        def wrong_shape(path):
            from safetensors.torch import load_file, save_file
            weights = load_file(os.path.join(path, "model.safetensors"))
            weights["model.layers.0.self_attn.q_proj.weight"] = torch.zeros(64, 32)
            save_file(weights, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})

        def unknown_architecture(path):
            with open(os.path.join(path, "config.json")) as f:
                config = json.load(f)
            config["model_type"] = "mamba"
            with open(os.path.join(path, "config.json"), "w") as f:
                json.dump(config, f)

        cases = {
            "truncated": (truncate, "model.safetensors"),
            "hostile": (hostile_header, "model.safetensors"),
            "missing": (drop_tensor, "model.layers.1.mlp.up_proj.weight"),
            "shape": (wrong_shape, "model.layers.0.self_attn.q_proj.weight has shape [64, 32]"),
            "arch": (unknown_architecture, "supported: gpt2, llama, mistral, qwen2, gemma2, gemma3_text"),
        }
        for name, (change, words) in cases.items():
            with self.subTest(case=name):
                error = self.load_failure(name, self.broken_copy(name, change))
                self.assertIn(words, error)
        self.assertIn("config.json: cannot be read", self.load_failure("absent", os.path.join(self.dir, "absent")))
        got, _ = self.modeld.logits("good", [[1, 2, 3]])
        self.assertEqual(got.shape, (1, 3, 320))

    def test_load_and_unload_at_run_time_and_a_hidden_path_never_shows(self):
        self.modeld.client.call("model.load", name="secret", path=self.good, hidden=True)
        self.modeld.wait_settled()
        info = self.modeld.client.call("model.info", model="secret")
        self.assertNotIn("path", info)
        self.assertNotIn(self.good, repr(self.modeld.client.call("model.list")))
        hidden_broken = self.broken_copy("hb", lambda p: os.remove(os.path.join(p, "model.safetensors")))
        error = self.load_failure("hidden-broken", hidden_broken, hidden=True)
        self.assertNotIn(hidden_broken, error)
        self.assertIn("<hidden>", error)
        self.modeld.client.call("model.unload", model="secret")
        with self.assertRaises(RpcError) as raised:
            self.modeld.client.call("model.info", model="secret")
        self.assertEqual(raised.exception.code, "not_found")

    def test_gpu_info_says_there_is_no_gpu_here(self):
        info = self.modeld.client.call("gpu.info")
        if info["gpus"]:
            self.skipTest("this machine has a GPU")
        self.assertEqual(info["source"], "none")
        self.assertIn("no NVIDIA GPU", info["message"])
        with self.assertRaises(RpcError) as raised:
            self.modeld.client.call("gpu.probe")
        self.assertEqual(raised.exception.code, "unavailable")
        error = self.load_failure("gpu", self.good, device="cuda")
        self.assertIn("CUDA is unavailable", error)

if __name__ == "__main__":
    unittest.main()
