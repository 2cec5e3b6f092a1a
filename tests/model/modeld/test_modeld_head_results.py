"""attn.hook_result in gpubox-modeld: each head's output z_h @ W_O[h] before the
sum over heads and b_O, [batch, pos, heads, d_model], on GPT-2 (W_O a Conv1D,
with a bias) and Llama (grouped-query attention: 2 key-value heads for 4).

Exact identities and the model's own other hook points are the reference here
(test_modeld_transformer_lens.py checks the values against TransformerLens'
use_attn_result): summed over heads plus b_O it is hook_attn_out; zeroing a
head's result is zeroing its hook_z. Where an edit makes the attention output
the sum of the results (not the fused projection), the two differ by float32
summation order only: RESUM_TOLERANCE (1e-5 relative, the measured figure
printed) bounds it. A capture alone changes nothing (bit-equal logits).
test_modeld_batching.py checks requests that capture and edit it in a batched
generate against their solo runs, bit for bit.
"""
import unittest

import numpy as np

from gpubox.client import RpcError
from gpubox.models import Model
from served_models import ServedTinyModels
from test_modeld_hooks import relative_error

PROMPT = [5, 17, 33, 2, 9, 100, 7, 8, 19, 44, 3]
RESUM_TOLERANCE = 1e-5
HEADS, D_MODEL = 4, 64


def result(layer):
    return "blocks.%d.attn.hook_result" % layer


class HeadResults(ServedTinyModels):
    ARCHITECTURES = ("gpt2", "llama")
    SEED = 70

    def b_o(self, name, layer):
        model = self.models[name][1]
        if name == "gpt2":
            return model.transformer.h[layer].attn.c_proj.bias.detach().numpy()
        bias = model.model.layers[layer].self_attn.o_proj.bias
        return np.zeros(D_MODEL, np.float32) if bias is None else bias.detach().numpy()

    def pass_of(self, name, **kw):
        return Model(self.modeld.client, name).run(ids=[PROMPT, PROMPT[3:] + [4, 4, 4]], **kw)

    def test_listed_with_its_shape_and_left_out_of_every_point_captures(self):
        for name in self.ARCHITECTURES:
            listed = {h["name"]: h for h in Model(self.modeld.client, name).hooks()}
            self.assertEqual(listed[result(1)]["shape"], ["batch", "pos", HEADS, D_MODEL])
            self.assertEqual([n for n, h in listed.items() if h.get("opt_in")], [result(l) for l in range(3)])
            names = list(listed)
            self.assertEqual(names.index(result(0)), names.index("blocks.0.attn.hook_z") + 1)  # forward order
            model = Model(self.modeld.client, name)
            _, cache = model.run_with_cache(ids=PROMPT)
            self.assertNotIn(result(0), cache)
            self.assertIn("blocks.0.attn.hook_z", cache)
            _, cache = model.run_with_cache(ids=PROMPT, names=[result(0)])
            self.assertEqual(tuple(cache[result(0)].shape), (1, len(PROMPT), HEADS, D_MODEL))

    def test_summed_over_heads_plus_b_o_is_hook_attn_out(self):
        worst = 0.0
        for name in self.ARCHITECTURES:
            for layer in range(3):
                got = self.pass_of(name, capture=[result(layer), "blocks.%d.hook_attn_out" % layer])
                summed = got[result(layer)].numpy().sum(2) + self.b_o(name, layer)
                error = relative_error(summed, got["blocks.%d.hook_attn_out" % layer].numpy())
                worst = max(worst, error)
                self.assertLess(error, RESUM_TOLERANCE, (name, layer))
        print("\nsum over heads + b_O against hook_attn_out: %.2e relative at most" % worst)

    def test_a_capture_leaves_the_logits_bit_equal_and_heads_select(self):
        for name in self.ARCHITECTURES:
            plain = self.pass_of(name)["logits"].numpy()
            got = self.pass_of(name, ops=[{"op": "capture", "hook": result(1)},
                                      {"op": "capture", "hook": result(1), "heads": [-1, 0], "rows": [1], "positions": [2]}])
            np.testing.assert_array_equal(got["logits"].numpy(), plain)
            whole, picked = (c[1].numpy() for c in got["captures"])
            np.testing.assert_array_equal(picked, whole[[1]][:, [2]][:, :, [3, 0]])

    def test_the_resummed_output_differs_from_the_fused_one_by_rounding_only(self):
        worst = 0.0
        for name in self.ARCHITECTURES:
            plain = self.pass_of(name)["logits"].numpy()
            same = self.pass_of(name, ops=[{"op": "scale", "hook": result(l), "factor": 1.0} for l in range(3)])["logits"].numpy()
            error = relative_error(same, plain)
            worst = max(worst, error)
            self.assertLess(error, RESUM_TOLERANCE, name)
        print("\nlogits with every layer's output summed from its results: %.2e relative to the fused path" % worst)

    def test_editing_a_heads_result_is_editing_its_z(self):
        for name in self.ARCHITECTURES:
            with self.subTest(architecture=name):
                plain = self.pass_of(name)["logits"].numpy()
                by_result = self.pass_of(name, ops=[{"op": "zero", "hook": result(0), "heads": [1, 3]},
                                                {"op": "scale", "hook": result(2), "heads": [2], "positions": [-1],
                                                 "factor": -2.0}])["logits"].numpy()
                by_z = self.pass_of(name, ops=[{"op": "zero", "hook": "blocks.0.attn.hook_z", "heads": [1, 3]},
                                           {"op": "scale", "hook": "blocks.2.attn.hook_z", "heads": [2], "positions": [-1],
                                            "factor": -2.0}])["logits"].numpy()
                self.assertLess(relative_error(by_result, by_z), RESUM_TOLERANCE)
                self.assertGreater(relative_error(by_result, plain), 1e-3, "the edit must matter to be a test")

    def test_set_add_and_patch_per_head(self):
        vector = np.random.default_rng(3).standard_normal(D_MODEL).astype(np.float32)
        name = "llama"
        base = self.pass_of(name, capture=[result(1), "blocks.1.hook_attn_out"])
        got = self.pass_of(name, ops=[{"op": "add", "hook": result(1), "heads": [2], "positions": [0], "vector": vector, "scale": 0.5},
                                  {"op": "capture", "hook": result(1)}, {"op": "capture", "hook": "blocks.1.hook_attn_out"}])
        want = base[result(1)].numpy().copy()
        want[:, 0, 2] += 0.5 * vector
        self.assertLess(relative_error(got[result(1)].numpy(), want), RESUM_TOLERANCE)
        # The attention output follows the edit: only position 0 moves, by the vector.
        moved = got["blocks.1.hook_attn_out"].numpy() - base["blocks.1.hook_attn_out"].numpy()
        np.testing.assert_allclose(moved[:, 0], np.broadcast_to(0.5 * vector, moved[:, 0].shape), atol=1e-5)
        self.assertLess(np.abs(moved[:, 1:]).max(), 1e-5)
        patched = self.pass_of(name, ops=[{"op": "patch", "hook": result(1), "rows": [1], "heads": [0], "from_row": 0},
                                      {"op": "capture", "hook": result(1)}])[result(1)].numpy()
        np.testing.assert_array_equal(patched[1, :, 0], base[result(1)].numpy()[0, :, 0])
        np.testing.assert_array_equal(patched[:, :, 1:], base[result(1)].numpy()[:, :, 1:])
        value = np.full((1, 1, 1, D_MODEL), 0.25, np.float32)
        set_ = self.pass_of(name, ops=[{"op": "set", "hook": result(2), "heads": [3], "value": value},
                                   {"op": "capture", "hook": result(2)}])[result(2)].numpy()
        np.testing.assert_array_equal(set_[:, :, 3], np.full((2, len(PROMPT), D_MODEL), 0.25, np.float32))

    def test_its_gradient_is_hook_attn_outs_for_every_head(self):
        # attn_out = sum over heads of result + b_O, so d/d result[h] = d/d attn_out for each head h, exactly.
        for name in self.ARCHITECTURES:
            with self.subTest(architecture=name):
                got = self.pass_of(name, ops=[{"op": "capture_grad", "hook": result(1)},
                                              {"op": "capture_grad", "hook": "blocks.1.hook_attn_out"},
                                              {"op": "capture_grad", "hook": result(2), "heads": [3], "positions": [-1]}],
                                   grad_of={"logit_diff": {"tokens": [7, 11]}})
                (_, by_result), (_, by_out), (_, picked) = got["grads"]
                self.assertEqual(tuple(by_result.shape), (2, len(PROMPT), HEADS, D_MODEL))
                self.assertGreater(float(by_out.abs().max()), 0.0)
                for head in range(HEADS):
                    np.testing.assert_array_equal(by_result[:, :, head].numpy(), by_out.numpy())
                self.assertEqual(tuple(picked.shape), (2, 1, 1, D_MODEL))
                self.assertGreater(float(picked.abs().max()), 0.0)

    def test_generate_captures_it_per_step_and_an_edit_equals_the_z_edit(self):
        for name in self.ARCHITECTURES:
            with self.subTest(architecture=name):
                model = Model(self.modeld.client, name)
                got = model.generate(PROMPT, max_new_tokens=6, ignore_eos=True, capture=[result(2)])
                self.assertEqual([c[0] for c in got["captures"]], list(range(6)))
                self.assertEqual(tuple(got["captures"][3][2].shape), (1, 1, HEADS, D_MODEL))
                streamed = np.concatenate([c[2] for c in got["captures"]], 1)
                whole = model.run(ids=PROMPT + got["tokens"][:-1], capture=[result(2)])[result(2)].numpy()
                self.assertLess(relative_error(streamed, whole), 1e-4)  # prefill against decode steps: as test_modeld_interventions
                by_result = model.generate(PROMPT, max_new_tokens=12, ignore_eos=True,
                                           ops=[{"op": "zero", "hook": result(0), "heads": [0, 2]}])
                by_z = model.generate(PROMPT, max_new_tokens=12, ignore_eos=True,
                                      ops=[{"op": "zero", "hook": "blocks.0.attn.hook_z", "heads": [0, 2]}])
                self.assertEqual(by_result["tokens"], by_z["tokens"])
                plain = model.generate(PROMPT, max_new_tokens=12, ignore_eos=True)
                self.assertNotEqual(by_result["tokens"], plain["tokens"], "the ablation must matter to be a test")

    def test_bad_heads_are_refused_naming_the_field(self):
        cases = [([{"op": "capture", "hook": result(0), "heads": [HEADS]}], ["ops[0].heads", str(HEADS), "heads"]),
                 ([{"op": "zero", "hook": result(0), "heads": [-HEADS - 1]}], ["ops[0].heads"]),
                 ([{"op": "add", "hook": result(0), "vector": np.zeros(16, np.float32)}], ["ops[0].vector", "hook_result"]),
                 ([{"op": "capture", "hook": "blocks.3.attn.hook_result"}], ["blocks.3.attn.hook_result",
                                                                            "blocks.2.attn.hook_result"])]
        for ops, words in cases:
            with self.subTest(ops=ops):
                with self.assertRaises(RpcError) as raised:
                    Model(self.modeld.client, "llama").run(ids=PROMPT, ops=ops)
                self.assertEqual(raised.exception.code, "invalid_request")
                for word in words:
                    self.assertIn(word, str(raised.exception))
        with self.assertRaises(RpcError) as raised:
            Model(self.modeld.client, "gpt2").generate(PROMPT, max_new_tokens=3, ops=[{"op": "zero", "hook": result(1),
                                                                                       "heads": [7]}])
        self.assertEqual(raised.exception.code, "invalid_request")
        self.assertIn("ops[0].heads", str(raised.exception))
        self.assertEqual(len(Model(self.modeld.client, "llama").run(ids=PROMPT)["logits"]), 1)  # and modeld serves on


if __name__ == "__main__":
    unittest.main()
