"""gpubox.hooks (python/gpubox/hooks.py) on transformers models against
gpubox-modeld's model.run with the same spec on the same saved model: a
notebook cell and an RPC caller share names and semantics.

Interpreter: build/venv/bin/python (torch and transformers from PyPI), the
tiny random models of tiny_models.py. Two implementations (PyTorch forward
hooks on transformers' modules, and modeld's own forward pass) compared in
float32 within 1e-4 relative, the tolerance of test_modeld_models.
"""

import numpy as np
import torch

from gpubox import hooks
from gpubox.models import Model
from served_models import ServedTinyModels
from test_modeld_hooks import relative_error

TOLERANCE = 1e-4
ARCHITECTURES = ["gpt2", "llama", "mistral", "qwen2", "gemma2"]
CLEAN = [5, 17, 33, 2, 9, 100, 7, 8, 19, 44, 3]
CORRUPT = [5, 17, 61, 2, 9, 100, 7, 80, 19, 44, 3]


class HooksToolkit(ServedTinyModels):
    ARCHITECTURES = ARCHITECTURES
    SEED = 70

    def both(self, name, ids, **spec):
        native = Model(self.modeld.client, name).run(ids=ids, **spec)
        local = hooks.run(self.models[name][1], ids, **spec)
        return native, local

    def test_names_are_the_model_hosts_less_the_points_no_module_carries(self):
        for name in ARCHITECTURES:
            served = [h["name"] for h in self.modeld.client.call("model.hooks", model=name)["hooks"]]
            local = hooks.names(self.models[name][1])
            self.assertEqual([n for n in served if n in local], local, name)  # same order
            missing = {n.split(".")[-1] for n in served if n not in local}
            self.assertLessEqual(missing, {"hook_rot_q", "hook_rot_k", "hook_attn_scores", "hook_pattern"}, name)
            self.assertIn("blocks.2.ln2.hook_normalized", local)

    def test_every_capture_matches_model_run(self):
        for name in ARCHITECTURES:
            names = hooks.names(self.models[name][1])
            native, local = self.both(name, [CLEAN, CORRUPT], capture=names)
            self.assertEqual([h for h, _ in local["captures"]], names)
            for (hook, want), (_, got) in zip(native["captures"], local["captures"]):
                with self.subTest(architecture=name, hook=hook):
                    self.assertEqual(tuple(got.shape), tuple(want.shape))
                    self.assertLess(relative_error(got.numpy(), want.numpy()), TOLERANCE)

    def test_edits_match_model_run(self):
        g = torch.Generator().manual_seed(4)
        vector, direction = torch.randn(64, generator=g), torch.randn(64, generator=g)
        ops = [{"op": "add", "hook": "blocks.0.hook_resid_post", "vector": vector, "scale": 3.0, "positions": [-1, 2]},
               {"op": "zero", "hook": "blocks.1.attn.hook_z", "heads": [1], "rows": [1]},
               {"op": "scale", "hook": "blocks.0.attn.hook_result", "factor": -2.0, "heads": [2], "positions": [5]},
               {"op": "set", "hook": "blocks.1.attn.hook_q", "value": torch.ones(16), "heads": [0], "positions": [4]},
               {"op": "scale", "hook": "blocks.1.ln2.hook_normalized", "factor": 1.5, "positions": [3]},
               {"op": "patch", "hook": "blocks.2.hook_resid_pre", "from_row": 0, "rows": [1], "positions": [2, 7]},
               {"op": "project_out", "hook": "blocks.2.hook_mlp_out", "direction": direction},
               {"op": "capture", "hook": "blocks.2.hook_resid_post"},
               {"op": "scale", "hook": "logits", "factor": 0.5, "positions": [0]}]
        for name in ARCHITECTURES:
            with self.subTest(architecture=name):
                native, local = self.both(name, [CLEAN, CORRUPT], ops=ops)
                self.assertLess(relative_error(local["logits"].numpy(), native["logits"].numpy()), TOLERANCE)
                self.assertLess(relative_error(local["blocks.2.hook_resid_post"].numpy(),
                                               native["blocks.2.hook_resid_post"].numpy()), TOLERANCE)
                plain = Model(self.modeld.client, name).run(ids=[CLEAN, CORRUPT])["logits"].numpy()
                self.assertGreater(relative_error(local["logits"].numpy(), plain), 1e-3)

    def test_your_own_functions_match_model_run(self):
        """hooks={hook: fn}: the transformers model calls the Python function, the model host its TorchScript."""
        from test_modeld_fn import ablate_head_2, observe, project_out
        direction = torch.randn(64, generator=torch.Generator().manual_seed(5))
        fns = {"blocks.0.attn.hook_z": (ablate_head_2, {"rows": [1]}),
               "blocks.1.hook_resid_post": (project_out, {"extra": {"direction": direction}, "positions": [-1, 3]}),
               "blocks.2.hook_resid_pre": observe}
        for name in ("gpt2", "llama"):
            with self.subTest(architecture=name):
                native, local = self.both(name, [CLEAN, CORRUPT], hooks=fns)
                self.assertLess(relative_error(local["logits"].numpy(), native["logits"].numpy()), TOLERANCE)
                norm = "blocks.2.hook_resid_pre:norm"
                self.assertLess(relative_error(local[norm].numpy(), native[norm].numpy()), TOLERANCE)
                plain = Model(self.modeld.client, name).run(ids=[CLEAN, CORRUPT])["logits"].numpy()
                self.assertGreater(relative_error(local["logits"].numpy(), plain), 1e-3)

    def test_no_ops_leave_the_model_and_its_logits_as_they_were(self):
        model = self.models["llama"][1]
        with torch.no_grad():
            plain = model(torch.tensor([CLEAN])).logits
        r = hooks.run(model, CLEAN, capture=["blocks.0.hook_resid_post", "blocks.0.ln1.hook_normalized"])
        torch.testing.assert_close(r["logits"], plain, rtol=0, atol=0)
        hooks.run(model, CLEAN, add={"blocks.0.hook_resid_post": (torch.ones(64), 5.0)})
        with torch.no_grad():
            torch.testing.assert_close(model(torch.tensor([CLEAN])).logits, plain, rtol=0, atol=0)  # hooks removed

    def test_bad_specs_raise_value_errors_naming_the_field_and_run_nothing(self):
        model = self.models["qwen2"][1]
        calls = []
        handle = model.register_forward_hook(lambda *a: calls.append(1))
        cases = [
            ([{"op": "capture", "hook": "blocks.7.hook_resid_post"}], "ops[0].hook"),
            ([{"op": "steer", "hook": "hook_embed"}], "ops[0].op"),
            ([{"op": "zero", "hook": "blocks.0.hook_resid_post", "heads": [0]}], "no heads axis"),
            ([{"op": "zero", "hook": "blocks.0.attn.hook_z", "heads": [4]}], "4 is out of range for 4 heads"),
            ([{"op": "add", "hook": "hook_embed", "vector": np.zeros(63)}], "does not broadcast"),
            ([{"op": "zero", "hook": "blocks.0.hook_resid_mid"}], "captured but not edited"),
            ([{"op": "patch", "hook": "hook_embed"}], "either value"),
            ([{"op": "capture", "hook": "blocks.0.attn.hook_pattern"}], "ops[0].hook"),
            ([{"op": "capture", "hook": "blocks.0.resid_post"}], "the nearest valid names are blocks.0.hook_resid_post, "),
            ([{"op": "add", "hook": "hook_embed", "vector": np.r_[np.zeros(63), np.inf]}],
             "ops[0].vector: element [63] is +inf; tensors must be finite"),
            ([{"op": "set", "hook": "hook_embed", "value": np.zeros(64), "allow_nonfinite": 1}],
             "ops[0].allow_nonfinite: expected True or False"),
        ]
        try:
            for ops, words in cases:
                with self.subTest(ops=str(ops)[:60]):
                    with self.assertRaises(ValueError) as raised:
                        hooks.run(model, CLEAN, ops=ops)
                    self.assertIn(words, str(raised.exception))
        finally:
            handle.remove()
        self.assertEqual(calls, [])
