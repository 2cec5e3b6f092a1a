"""model.hooks and model.run's captures against Hugging Face forward hooks.

Interpreter: build/venv/bin/python (torch and transformers from PyPI). The
tiny random models of tiny_models.py; each capture is compared with the
output (or input) of the transformers module it names, in float32, within
1e-4 relative (as the logits are in test_modeld_models.py): every hook point
that is one module's input or output there (module_map); rot_q/rot_k,
resid_mid, attn_scores, pattern and ln*.hook_normalized (the normalized value
before the norm's weights) have no such module and are checked for shape
only here; test_modeld_transformer_lens.py checks every point against
TransformerLens.
"""
import unittest

import numpy as np
import torch

from gpubox.client import RpcError
from gpubox.models import Model
from served_models import ServedTinyModels

TOLERANCE = 1e-4
ARCHITECTURES = ["gpt2", "llama", "mistral", "qwen2", "gemma2"]
PROMPT = [5, 17, 33, 2, 9, 100, 7, 8, 19, 44, 3]


def relative_error(got, want):
    return float(np.abs(got - want).max() / np.abs(want).max())


def first(value):
    return value[0] if isinstance(value, tuple) else value


def module_map(name, model, layer):
    """TransformerLens name -> (module, "in"|"out", reshape of the module's value) in this transformers model."""
    heads, kv_heads = 4, 2 if name != "gpt2" else 4
    split = lambda n: (lambda t: t.view(t.shape[0], t.shape[1], n, -1))  # noqa: E731
    b = "blocks.%d." % layer
    if name == "gpt2":
        t, block = model.transformer, model.transformer.h[layer]
        qkv = lambda i: (lambda x: split(heads)(x.split(64, -1)[i]))  # noqa: E731
        return {"hook_embed": (t.wte, "out", None), "hook_pos_embed": (t.wpe, "out", None),
                b + "hook_resid_pre": (block, "in", None), b + "hook_resid_post": (block, "out", None),
                b + "attn.hook_q": (block.attn.c_attn, "out", qkv(0)), b + "attn.hook_k": (block.attn.c_attn, "out", qkv(1)),
                b + "attn.hook_v": (block.attn.c_attn, "out", qkv(2)),
                b + "attn.hook_z": (block.attn.c_proj, "in", split(heads)),
                b + "hook_attn_out": (block.attn.c_proj, "out", None),
                b + "mlp.hook_pre": (block.mlp.c_fc, "out", None), b + "mlp.hook_post": (block.mlp.c_proj, "in", None),
                b + "hook_mlp_out": (block.mlp, "out", None)}
    inner, block = model.model, model.model.layers[layer]
    gemma = name == "gemma2"
    return {"hook_embed": (inner.embed_tokens, "out", None),
            b + "hook_resid_pre": (block, "in", None), b + "hook_resid_post": (block, "out", None),
            b + "attn.hook_q": (block.self_attn.q_proj, "out", split(heads)),
            b + "attn.hook_k": (block.self_attn.k_proj, "out", split(kv_heads)),
            b + "attn.hook_v": (block.self_attn.v_proj, "out", split(kv_heads)),
            b + "attn.hook_z": (block.self_attn.o_proj, "in", split(heads)),
            b + "hook_attn_out": (block.post_attention_layernorm if gemma else block.self_attn.o_proj, "out", None),
            b + "mlp.hook_pre": (block.mlp.gate_proj, "out", None),
            b + "mlp.hook_pre_linear": (block.mlp.up_proj, "out", None),
            b + "mlp.hook_post": (block.mlp.down_proj, "in", None),
            b + "hook_mlp_out": (block.post_feedforward_layernorm if gemma else block.mlp, "out", None)}


def transformers_values(name, model, prompt, layer):
    """Every mapped hook name's value in transformers' forward on prompt (batch 1)."""
    values, handles = {}, []
    for hook, (module, where, reshape) in module_map(name, model, layer).items():
        def save(value, hook=hook, reshape=reshape):
            value = first(value).detach()
            values[hook] = (reshape(value) if reshape else value).float().numpy()
        if where == "in":
            handles.append(module.register_forward_pre_hook(
                lambda m, args, kwargs, save=save: save(args[0] if args else kwargs["hidden_states"]), with_kwargs=True))
        else:
            handles.append(module.register_forward_hook(lambda m, args, out, save=save: save(out)))
    try:
        with torch.no_grad():
            model(torch.tensor([prompt]))
    finally:
        for h in handles:
            h.remove()
    return values


class ModeldHooks(ServedTinyModels):
    ARCHITECTURES = ARCHITECTURES
    SEED = 0

    def run_model(self, model, ids, ops, **params):
        """model.run -> {name: numpy array} (logits first), the result."""
        result = self.modeld.client.call("model.run", model=model, ids=ids, ops=ops, **params)
        tensors = {}
        for item in result["outputs"]:
            dtype = {"float32": np.float32, "float16": np.float16}[item["dtype"]]
            tensors[item["name"]] = np.frombuffer(item["attachments"][0], dtype=dtype).reshape(item["shape"])
        return tensors, result

    def hooks(self, model):
        return {h["name"]: h["shape"] for h in self.modeld.client.call("model.hooks", model=model)["hooks"]}

    def test_model_hooks_lists_each_architectures_points_with_shapes(self):
        gpt2, llama, gemma2 = self.hooks("gpt2"), self.hooks("llama"), self.hooks("gemma2")
        self.assertIn("hook_pos_embed", gpt2)
        self.assertNotIn("hook_pos_embed", llama)
        self.assertNotIn("blocks.0.mlp.hook_pre_linear", gpt2)
        self.assertNotIn("blocks.0.attn.hook_rot_q", gpt2)
        self.assertEqual(llama["blocks.2.mlp.hook_pre_linear"], ["batch", "pos", 128])
        self.assertEqual(llama["blocks.0.attn.hook_k"], ["batch", "pos", 2, 16])
        self.assertEqual(llama["blocks.1.attn.hook_rot_q"], ["batch", "pos", 4, 16])
        self.assertEqual(gemma2["blocks.0.attn.hook_pattern"], ["batch", 4, "query_pos", "key_pos"])
        self.assertEqual(gemma2["blocks.2.hook_resid_post"], ["batch", "pos", 64])
        self.assertEqual(gpt2["logits"], ["batch", "pos", 320])
        self.assertNotIn("blocks.3.hook_resid_pre", llama)
        # Model.hooks() (the Python client) is the same list, in forward order.
        listed = Model(self.modeld.client, "llama").hooks()
        self.assertEqual({h["name"]: h["shape"] for h in listed}, llama)
        names = [h["name"] for h in listed]
        self.assertLess(names.index("hook_embed"), names.index("blocks.0.hook_resid_post"))
        self.assertLess(names.index("blocks.2.hook_resid_post"), names.index("logits"))

    def test_captures_match_transformers_forward_hooks(self):
        for name in ARCHITECTURES:
            for layer in (0, 2):
                want = transformers_values(name, self.models[name][1], PROMPT, layer)
                got, result = self.run_model(name, PROMPT, [{"op": "capture", "hook": h} for h in want])
                self.assertEqual(result["tensors"], ["logits"] + list(want))
                for hook, value in want.items():
                    with self.subTest(architecture=name, hook=hook):
                        self.assertEqual(got[hook].shape, (1,) + value.shape[1:])
                        self.assertLess(relative_error(got[hook], value), TOLERANCE)

    def test_every_listed_hook_can_be_captured_with_its_listed_shape(self):
        for name in ARCHITECTURES:
            listed = self.hooks(name)
            got, _ = self.run_model(name, [PROMPT, PROMPT[:4]], [{"op": "capture", "hook": h} for h in listed])
            for hook, shape in listed.items():
                concrete = [{"batch": 2, "pos": len(PROMPT), "query_pos": len(PROMPT), "key_pos": len(PROMPT)}.get(d, d)
                            for d in shape]
                self.assertEqual(list(got[hook].shape), concrete, (name, hook))

    def test_positions_select_along_the_position_axis(self):
        ops = [{"op": "capture", "hook": "blocks.1.hook_resid_post"},
               {"op": "capture", "hook": "blocks.1.hook_resid_post", "positions": [0, -1, 3]},
               {"op": "capture", "hook": "blocks.1.attn.hook_pattern"},
               {"op": "capture", "hook": "blocks.1.attn.hook_pattern", "positions": [-2]}]
        result = self.modeld.client.call("model.run", model="llama", ids=PROMPT, ops=ops)
        arrays = [np.frombuffer(i["attachments"][0], dtype=np.float32).reshape(i["shape"]) for i in result["outputs"][1:]]
        full, picked, pattern, last_pattern = arrays
        np.testing.assert_array_equal(picked, full[:, [0, len(PROMPT) - 1, 3]])
        np.testing.assert_array_equal(last_pattern, pattern[:, :, [len(PROMPT) - 2]])

    def test_model_dtype_capture_keeps_the_model_dtype(self):
        got, result = self.run_model("gpt2", PROMPT, [{"op": "capture", "hook": "hook_embed", "dtype": "model"}])
        self.assertEqual(result["outputs"][1]["dtype"], "float32")  # a float32 model
        self.assertEqual(got["hook_embed"].shape, (1, len(PROMPT), 64))

    def test_capturing_leaves_the_logits_bit_equal(self):
        for name in ARCHITECTURES:
            hooks = [h for h in self.hooks(name) if "hook_pattern" not in h and "hook_attn_scores" not in h]
            plain = self.modeld.client.call("model.forward", model=name, ids=[PROMPT, PROMPT[:5]])
            captured = self.modeld.client.call("model.run", model=name, ids=[PROMPT, PROMPT[:5]],
                                               ops=[{"op": "capture", "hook": h} for h in hooks])
            no_ops = self.modeld.client.call("model.run", model=name, ids=[PROMPT, PROMPT[:5]], ops=[])
            self.assertEqual(bytes(plain["outputs"][0]["attachments"][0]),
                             bytes(captured["outputs"][0]["attachments"][0]), name)
            self.assertEqual(bytes(plain["outputs"][0]["attachments"][0]),
                             bytes(no_ops["outputs"][0]["attachments"][0]), name)
            self.assertEqual(len(no_ops["outputs"]), 1)

    def test_bad_specs_are_refused_before_anything_runs(self):
        cases = [
            ([{"op": "capture", "hook": "blocks.9.hook_resid_post"}], ["blocks.9.hook_resid_post", "blocks.0.hook_resid_post"]),
            ([{"op": "capture", "hook": "blocks.0.hook_resid_post"}, {"op": "capture", "hook": "hook_nope"}],
             ["ops[1].hook", "hook_nope", "hook_embed", "model.hooks() lists them"]),
            ([{"op": "capture", "hook": "hook_embed", "positions": [len(PROMPT)]}], ["positions", str(len(PROMPT))]),
            ([{"op": "capture", "hook": "hook_embed", "positions": [-len(PROMPT) - 1]}], ["positions"]),
            ([{"op": "capture", "hook": "hook_embed", "dtype": "int8"}], ["dtype", "int8"]),
            ([{"op": "steer", "hook": "hook_embed"}], ["ops[0].op", "steer"]),
            ([{"op": "capture", "hook": "hook_embed", "heads": [0]}], ["heads"]),
            ({"op": "capture"}, ["ops: "]),
            ([{"op": "capture", "hook": "blocks.0.attn.hook_rot_q"}], ["hook_rot_q"]),  # GPT-2 has no RoPE
        ]
        for ops, words in cases:
            with self.subTest(ops=ops):
                with self.assertRaises(RpcError) as raised:
                    self.modeld.client.call("model.run", model="gpt2", ids=PROMPT, ops=ops)
                self.assertEqual(raised.exception.code, "invalid_request")
                for word in words:
                    self.assertIn(word, str(raised.exception))
                self.assertNotIn("params.", str(raised.exception), "the Python client's words, not the RPC's")
        self.assertEqual(self.modeld.client.call("modeld.status")["models"][0]["state"], "ready")

    def test_ops_sent_to_model_forward_are_refused_naming_model_run(self):
        for key, value in (("ops", [{"op": "capture", "hook": "hook_embed"}]), ("grad_of", {"loss": {}})):
            with self.subTest(key=key):
                with self.assertRaises(RpcError) as raised:
                    self.modeld.client.call("model.forward", model="gpt2", ids=PROMPT, **{key: value})
                self.assertEqual(raised.exception.code, "invalid_request")
                self.assertIn(key, str(raised.exception))
                self.assertIn("model.run is the forward pass that takes them", str(raised.exception))


if __name__ == "__main__":
    unittest.main()
