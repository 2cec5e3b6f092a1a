"""model.run's editing operations (hooks/README.md) against the same edit made
with Hugging Face forward hooks, and the identities that must hold exactly.

Interpreter: build/venv/bin/python (torch and transformers from PyPI), the
client's Model.run (python/gpubox/models.py), the tiny random models of
tiny_models.py. Each op is applied to the transformers model by a forward hook
on the module test_modeld_hooks.module_map names for the hook point (replacing
its output, or its input for the "in" points), and the logits of both are
compared in float32 within 1e-4 relative (the tolerance of test_modeld_models:
two implementations of the same float32 arithmetic, summed in different
orders). TransformerLens is not compared here yet.
"""
import os

import numpy as np
import torch

import tiny_models
from gpubox.client import RpcError
from gpubox.models import Model
from served_models import ServedTinyModels
from test_modeld_hooks import first, module_map, relative_error

TOLERANCE = 1e-4
ARCHITECTURES = ["gpt2", "llama", "qwen2", "gemma2"]
CLEAN = [5, 17, 33, 2, 9, 100, 7, 8, 19, 44, 3]
CORRUPT = [5, 17, 61, 2, 9, 100, 7, 80, 19, 44, 3]


def hf_logits(name, model, prompts, hook=None, edit=None, layer=0):
    """transformers' logits for a batch of equal-length prompts, with edit(value) -> value
    applied at hook (a TransformerLens name) through module_map's module."""
    handles = []
    if hook is not None:
        module, where, reshape = module_map(name, model, layer)[hook]

        def change(value):
            shaped = reshape(value) if reshape else value
            return edit(shaped.clone()).reshape(value.shape)
        if where == "in":
            def pre(m, args, kwargs):
                if args:
                    return (change(args[0]),) + tuple(args[1:]), kwargs
                return args, dict(kwargs, hidden_states=change(kwargs["hidden_states"]))
            handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
        else:
            def post(m, args, out):
                if isinstance(out, tuple):
                    return (change(out[0]),) + tuple(out[1:])
                return change(out)
            handles.append(module.register_forward_hook(post))
    try:
        with torch.no_grad():
            return model(torch.tensor(prompts)).logits.float().numpy()
    finally:
        for h in handles:
            h.remove()


class ModeldInterventions(ServedTinyModels):
    ARCHITECTURES = ARCHITECTURES
    SEED = 10

    @classmethod
    def extra_models(cls):
        """llama again with every attention output projection zeroed: "a model with no attention output"."""
        path, model = tiny_models.make(cls.dir, "llama", seed=cls.SEED + ARCHITECTURES.index("llama"))
        with torch.no_grad():
            for layer in model.model.layers:
                layer.self_attn.o_proj.weight.zero_()
        no_attention = os.path.join(cls.dir, "llama-no-attention")
        model.save_pretrained(no_attention)
        return [{"name": "llama-no-attention", "path": no_attention}]

    def model(self, name):
        return Model(self.modeld.client, name)

    def logits(self, name, prompts, ops=(), **kw):
        return self.model(name).run(ids=prompts, ops=ops, **kw)["logits"].numpy()

    def assert_matches_transformers(self, name, ops, hook, edit, layer, prompts=(CLEAN,)):
        got = self.logits(name, list(prompts), ops)
        want = hf_logits(name, self.models[name][1], list(prompts), hook, edit, layer)
        self.assertLess(relative_error(got, want), TOLERANCE)
        plain = hf_logits(name, self.models[name][1], list(prompts))
        self.assertGreater(relative_error(want, plain), 1e-3, "the edit must change the logits to be a test")

    def test_steering_add_matches_transformers(self):
        vector = torch.randn(64, generator=torch.Generator().manual_seed(1))
        for name in ARCHITECTURES:
            with self.subTest(architecture=name):
                hook = "blocks.1.hook_resid_post"
                ops = [{"op": "add", "hook": hook, "vector": vector, "scale": 4.0, "positions": [-1, 3]}]

                def edit(value):
                    value[:, [len(CLEAN) - 1, 3]] += 4.0 * vector
                    return value
                self.assert_matches_transformers(name, ops, hook, edit, 1)

    def test_zero_ablating_heads_of_z_matches_transformers(self):
        for name in ARCHITECTURES:
            with self.subTest(architecture=name):
                hook = "blocks.0.attn.hook_z"

                def edit(value):
                    value[:, :, [1, 3]] = 0
                    return value
                self.assert_matches_transformers(name, [{"op": "zero", "hook": hook, "heads": [1, -1]}], hook, edit, 0)

    def test_scale_set_mean_and_project_out_match_transformers(self):
        g = torch.Generator().manual_seed(2)
        direction = torch.randn(64, generator=g)
        mean = torch.randn(64, generator=g)
        unit = direction / direction.norm()
        cases = [
            ("gpt2", "blocks.2.mlp.hook_post", 2, {"op": "scale", "hook": "blocks.2.mlp.hook_post", "factor": 0.25},
             lambda v: v * 0.25),
            ("llama", "blocks.1.hook_attn_out", 1, {"op": "mean", "hook": "blocks.1.hook_attn_out", "value": mean,
                                                    "positions": [2, 4]},
             lambda v: torch.cat([v[:, :2], mean.expand(1, 1, 64), v[:, 3:4], mean.expand(1, 1, 64), v[:, 5:]], 1)),
            ("qwen2", "blocks.0.hook_resid_post", 0, {"op": "project_out", "hook": "blocks.0.hook_resid_post",
                                                      "direction": direction},
             lambda v: v - (v @ unit)[..., None] * unit),
            ("gemma2", "blocks.1.attn.hook_v", 1, {"op": "set", "hook": "blocks.1.attn.hook_v",
                                                   "value": torch.ones(16), "heads": [0]},
             lambda v: torch.cat([torch.ones_like(v[:, :, :1]), v[:, :, 1:]], 2)),
        ]
        for name, hook, layer, op, edit in cases:
            with self.subTest(architecture=name, op=op["op"]):
                self.assert_matches_transformers(name, [op], hook, edit, layer)

    def test_patching_from_the_clean_row_matches_transformers(self):
        for name in ARCHITECTURES:
            with self.subTest(architecture=name):
                hook, positions = "blocks.1.hook_resid_pre", [2, 7]
                clean_values = {}
                module, _, _ = module_map(name, self.models[name][1], 1)[hook]

                def keep(m, args, kwargs):
                    clean_values["v"] = (args[0] if args else kwargs["hidden_states"]).clone()
                handle = module.register_forward_pre_hook(keep, with_kwargs=True)
                try:
                    hf_logits(name, self.models[name][1], [CLEAN])
                finally:
                    handle.remove()

                def edit(value):
                    value[:, positions] = clean_values["v"][:, positions]
                    return value
                got = self.logits(name, [CLEAN, CORRUPT],
                                  [{"op": "patch", "hook": hook, "from_row": 0, "rows": [1], "positions": positions}])
                want = hf_logits(name, self.models[name][1], [CORRUPT], hook, edit, 1)
                self.assertLess(relative_error(got[1:], want), TOLERANCE)
                self.assertLess(relative_error(got[:1], hf_logits(name, self.models[name][1], [CLEAN])), TOLERANCE)

    def test_patching_every_position_of_the_last_residual_gives_the_clean_logits_exactly(self):
        for name in ARCHITECTURES:
            with self.subTest(architecture=name):
                got = self.logits(name, [CLEAN, CORRUPT],
                                  [{"op": "patch", "hook": "blocks.2.hook_resid_post", "from_row": 0, "rows": [1]}])
                np.testing.assert_array_equal(got[1], got[0])
                plain = self.logits(name, [CORRUPT])
                self.assertFalse(np.array_equal(plain[0], got[0]))

    def test_adding_a_zero_vector_changes_nothing(self):
        for name in ARCHITECTURES:
            with self.subTest(architecture=name):
                plain = self.modeld.client.call("model.forward", model=name, ids=[CLEAN, CORRUPT])
                plain = np.frombuffer(plain["outputs"][0]["attachments"][0], dtype=np.float32)
                steered = self.logits(name, [CLEAN, CORRUPT],
                                      [{"op": "add", "hook": "blocks.%d.hook_resid_post" % l, "vector": np.zeros(64),
                                        "scale": 7.0} for l in range(3)])
                np.testing.assert_array_equal(steered.reshape(-1), plain)

    def test_zero_ablating_every_heads_z_equals_a_model_with_no_attention_output(self):
        ops = [{"op": "zero", "hook": "blocks.%d.attn.hook_z" % l} for l in range(3)]
        ablated = self.logits("llama", [CLEAN, CORRUPT], ops)
        no_attention = self.logits("llama-no-attention", [CLEAN, CORRUPT])
        np.testing.assert_array_equal(ablated, no_attention)
        self.assertFalse(np.array_equal(ablated, self.logits("llama", [CLEAN, CORRUPT])))

    def test_ops_compose_in_order_and_captures_see_the_edits_before_them(self):
        hook = "blocks.0.hook_resid_post"
        r = self.model("llama").run(ids=CLEAN, ops=[
            {"op": "capture", "hook": hook}, {"op": "scale", "hook": hook, "factor": 2.0},
            {"op": "capture", "hook": hook}, {"op": "add", "hook": hook, "vector": np.ones(64, np.float32), "scale": -1.0},
            {"op": "capture", "hook": hook}])
        (n0, before), (_, doubled), (_, shifted) = r["captures"]
        self.assertEqual(n0, hook)
        np.testing.assert_array_equal(doubled.numpy(), before.numpy() * 2)
        np.testing.assert_allclose(shifted.numpy(), before.numpy() * 2 - 1, rtol=0, atol=1e-6)

    def test_capture_and_add_shorthands(self):
        vector = np.random.default_rng(3).standard_normal(64).astype(np.float32)
        r = self.model("gpt2").run(ids=CLEAN, capture=["blocks.0.hook_resid_post", "blocks.1.hook_resid_pre"],
                                   add={"blocks.0.hook_resid_post": (vector, 2.0)})
        np.testing.assert_allclose(r["blocks.1.hook_resid_pre"].numpy(), r["blocks.0.hook_resid_post"].numpy(), rtol=0, atol=0)
        plain = self.model("gpt2").run(ids=CLEAN, capture=["blocks.0.hook_resid_post"])
        np.testing.assert_allclose(r["blocks.0.hook_resid_post"].numpy(),
                                   plain["blocks.0.hook_resid_post"].numpy() + 2.0 * vector, rtol=0, atol=1e-5)

    def test_last_only_returns_the_last_position_with_the_same_captures(self):
        for name in ARCHITECTURES:
            with self.subTest(architecture=name):
                capture = ["blocks.1.hook_resid_post", "ln_final.hook_normalized", "logits"]
                full = self.model(name).run(ids=CLEAN, capture=capture)
                last = self.model(name).run(ids=CLEAN, capture=capture, last_only=True)
                self.assertEqual(tuple(last["logits"].shape), (1, 1, full["logits"].shape[-1]))
                # The blocks run on every position either way: their captures are bit-equal.
                np.testing.assert_array_equal(last["blocks.1.hook_resid_post"].numpy(),
                                              full["blocks.1.hook_resid_post"].numpy())
                # After the blocks only the last position is computed, by a smaller matrix product.
                for hook in ("ln_final.hook_normalized", "logits"):
                    self.assertEqual(last[hook].shape[1], 1)
                    self.assertLess(relative_error(last[hook].numpy(), full[hook].numpy()[:, -1:]), 1e-6)
                self.assertLess(relative_error(last["logits"].numpy(), full["logits"].numpy()[:, -1:]), 1e-6)
        with self.assertRaisesRegex(RpcError, "positions"):  # position 3 does not exist after narrowing
            self.model("gpt2").run(ids=CLEAN, ops=[{"op": "zero", "hook": "logits", "positions": [3]}], last_only=True)
        with self.assertRaisesRegex(RpcError, "last_only"):
            self.model("gpt2").run(ids=CLEAN, ops=[{"op": "capture_grad", "hook": "blocks.0.hook_resid_post"}],
                                   grad_of={"loss": {}}, last_only=True)

    def test_bad_editing_ops_are_refused_and_run_nothing(self):
        vector = np.zeros(64, np.float32)
        cases = [
            ([{"op": "add", "hook": "blocks.0.hook_resid_post", "vector": np.zeros(63, np.float32)}],
             ["ops[0].vector", "[63]", "[1, 11, 64]"]),
            ([{"op": "zero", "hook": "blocks.0.attn.hook_z", "heads": [4]}], ["heads", "4"]),
            ([{"op": "zero", "hook": "blocks.0.hook_resid_post", "heads": [0]}], ["no heads axis"]),
            ([{"op": "patch", "hook": "blocks.0.hook_resid_post", "from_row": 1}], ["from_row", "1"]),
            ([{"op": "project_out", "hook": "blocks.0.attn.hook_q", "direction": vector}], ["direction", "[16]"]),
            ([{"op": "add", "hook": "blocks.0.hook_resid_post",
               "vector": {"dtype": "float32", "shape": [64], "attachment": 3}}], ["attachment"]),
            ([{"op": "set", "hook": "hook_embed", "value": np.zeros((2, 64), np.float32)}], ["does not broadcast"]),
        ]
        for ops, words in cases:
            with self.subTest(ops=str(ops)[:80]):
                with self.assertRaises(RpcError) as raised:
                    self.model("llama").run(ids=CLEAN, ops=ops)
                self.assertEqual(raised.exception.code, "invalid_request")
                for word in words:
                    self.assertIn(word, raised.exception.message)
        self.assertEqual(self.modeld.client.call("modeld.status")["pid"], self.modeld.process.pid)


def hf_generate(model, prompt, new_tokens, module=None, edit_for_call=None):
    """transformers' greedy generate, with edit_for_call(call index, output) applied to
    module's output at each forward pass (call 0: the prompt's)."""
    calls, handles = [0], []
    if module is not None:
        def post(m, args, out):
            edited = edit_for_call(calls[0], first(out))
            calls[0] += 1
            return (edited,) + tuple(out[1:]) if isinstance(out, tuple) else edited
        handles.append(module.register_forward_hook(post))
    try:
        with torch.no_grad():
            out = model.generate(torch.tensor([prompt]), max_new_tokens=new_tokens, do_sample=False,
                                 min_new_tokens=new_tokens, pad_token_id=0)
    finally:
        for h in handles:
            h.remove()
    return out[0, len(prompt):].tolist()


class ModeldGenerateInterventions(ServedTinyModels):
    NEW = 6

    ARCHITECTURES = ("llama", "gpt2")
    SEED = 30
    vector = torch.randn(64, generator=torch.Generator().manual_seed(5)) * 3

    def generate(self, name, **kw):
        return Model(self.modeld.client, name).generate(CLEAN, max_new_tokens=self.NEW, ignore_eos=True, **kw)

    def test_steering_at_every_step_matches_transformers_generate(self):
        for name, block in (("llama", lambda m: m.model.layers[1]), ("gpt2", lambda m: m.transformer.h[1])):
            with self.subTest(architecture=name):
                model = self.models[name][1]
                want = hf_generate(model, CLEAN, self.NEW, block(model), lambda call, out: out + 2.0 * self.vector)
                got = self.generate(name, add={"blocks.1.hook_resid_post": (self.vector, 2.0)})
                self.assertEqual(got["tokens"], want)
                self.assertNotEqual(want, hf_generate(model, CLEAN, self.NEW))

    def test_steps_limit_an_op_to_the_passes_named(self):
        model = self.models["llama"][1]
        only_prompt_last = lambda call, out: torch.cat([out[:, :-1], out[:, -1:] + self.vector], 1) if call == 0 else out  # noqa: E731
        want = hf_generate(model, CLEAN, self.NEW, model.model.layers[0], only_prompt_last)
        got = self.generate("llama", ops=[{"op": "add", "hook": "blocks.0.hook_resid_post", "vector": self.vector,
                                           "positions": [-1], "steps": [0]}])
        self.assertEqual(got["tokens"], want)
        third = lambda call, out: out + self.vector if call in (2, 4) else out  # noqa: E731
        want = hf_generate(model, CLEAN, self.NEW, model.model.layers[0], third)
        got = self.generate("llama", ops=[{"op": "add", "hook": "blocks.0.hook_resid_post", "vector": self.vector,
                                           "steps": [2, 4]}])
        self.assertEqual(got["tokens"], want)

    def test_per_step_captures_are_streamed_and_match_transformers(self):
        hook = "blocks.2.hook_resid_post"
        items = list(Model(self.modeld.client, "llama").generate_stream(
            CLEAN, max_new_tokens=self.NEW, ignore_eos=True, capture=[hook]))
        captures = [i for i in items if "name" in i]
        steps = [i for i in items if "tokens" in i]
        self.assertEqual([c["step"] for c in captures], list(range(self.NEW)))
        # each pass's capture arrives before the token that pass picked
        self.assertEqual(["name" in i for i in items[:2]], [True, False])
        self.assertEqual(tuple(captures[0]["tensor"].shape), (1, len(CLEAN), 64))
        self.assertEqual(tuple(captures[3]["tensor"].shape), (1, 1, 64))
        tokens = [s["tokens"][0] for s in steps]
        full = CLEAN + tokens[:-1]
        values = {}
        module = self.models["llama"][1].model.layers[2]
        handle = module.register_forward_hook(lambda m, a, out: values.setdefault("v", first(out).detach().clone()))
        try:
            with torch.no_grad():
                self.models["llama"][1](torch.tensor([full]))
        finally:
            handle.remove()
        streamed = torch.cat([c["tensor"] for c in captures], 1).numpy()
        self.assertLess(relative_error(streamed, values["v"].numpy()), TOLERANCE)

    def test_bad_generate_specs_are_refused_before_a_token_is_made(self):
        cases = [
            ([{"op": "add", "hook": "blocks.0.hook_resid_post", "vector": np.zeros(64, np.float32), "steps": [6]}],
             ["ops[0].steps", "0 to 5"]),
            ([{"op": "zero", "hook": "blocks.0.hook_resid_post", "positions": [3]}],
             ["ops[0].positions", "one position each", "\"steps\": [0]"]),
            ([{"op": "zero", "hook": "blocks.0.hook_resid_post", "steps": []}], ["steps"]),
            ([{"op": "zero", "hook": "blocks.9.hook_resid_post"}], ["blocks.9.hook_resid_post"]),
        ]
        for ops, words in cases:
            with self.subTest(ops=str(ops)[:80]):
                with self.assertRaises(RpcError) as raised:
                    list(Model(self.modeld.client, "llama").generate_stream(CLEAN, max_new_tokens=self.NEW, ops=ops))
                self.assertEqual(raised.exception.code, "invalid_request")
                for word in words:
                    self.assertIn(word, raised.exception.message)
        # positions [3] is fine when kept to the prompt's pass
        ok = self.generate("llama", ops=[{"op": "zero", "hook": "blocks.0.hook_resid_post", "positions": [3], "steps": [0]}])
        self.assertEqual(len(ok["tokens"]), self.NEW)

    def test_the_logits_hook_holds_the_last_position_at_every_pass(self):
        # A generation computes the last position's logits only, the prompt's pass too: positions count from there.
        ops = [{"op": "capture", "hook": "logits", "positions": [-1]}]
        items = list(Model(self.modeld.client, "llama").generate_stream(CLEAN, max_new_tokens=self.NEW,
                                                                        ignore_eos=True, ops=ops))
        captures = [i for i in items if "name" in i]
        self.assertEqual([c["step"] for c in captures], list(range(self.NEW)))
        self.assertEqual({tuple(c["tensor"].shape) for c in captures}, {(1, 1, 320)})
        plain = self.generate("llama")["tokens"]
        self.assertEqual([int(c["tensor"][0, 0].argmax()) for c in captures], plain)  # greedy picks from these
        with self.assertRaises(RpcError) as raised:
            self.generate("llama", ops=[{"op": "zero", "hook": "logits", "positions": [3], "steps": [0]}])
        self.assertEqual(raised.exception.code, "invalid_request")
        self.assertIn("ops[0].positions", raised.exception.message)

    def test_non_finite_tensors_are_refused_unless_allowed_and_sampling_never_fails_as_internal(self):
        vector = self.vector.clone()
        vector[7] = float("nan")
        nan_add = [{"op": "add", "hook": "blocks.1.hook_resid_post", "vector": vector, "positions": [2], "steps": [0]}]
        run_ops = [{k: v for k, v in nan_add[0].items() if k != "steps"}]
        for call, ops in ((lambda ops: Model(self.modeld.client, "llama").run(ids=CLEAN, ops=ops), run_ops),
                          (lambda ops: self.generate("llama", ops=ops), nan_add)):
            with self.assertRaises(RpcError) as raised:
                call(ops)
            self.assertEqual(raised.exception.code, "invalid_request")
            self.assertIn("ops[0].vector: element [7] is NaN", raised.exception.message)
        logits = Model(self.modeld.client, "llama").run(ids=CLEAN, ops=[dict(run_ops[0], allow_nonfinite=True)])["logits"]
        self.assertTrue(torch.isnan(logits[0, -1]).all())  # one NaN position spreads through attention
        with self.assertRaises(RpcError) as raised:
            self.generate("llama", ops=[dict(nan_add[0], allow_nonfinite=True)], temperature=0.8, seed=1)
        self.assertEqual(raised.exception.code, "invalid_request")
        self.assertIn("cannot pick token 0: the logits hold NaN or infinities", raised.exception.message)
        self.assertEqual(len(self.generate("llama")["tokens"]), self.NEW)  # and modeld serves on

    def test_greedy_refuses_non_finite_logits_as_sampling_does(self):
        vector = self.vector.clone()
        vector[7] = float("nan")
        nan_add = {"op": "add", "hook": "blocks.1.hook_resid_post", "vector": vector, "positions": [2], "steps": [0],
                   "allow_nonfinite": True}
        with self.assertRaises(RpcError) as raised:  # argmax of NaN logits picked token 0 at every step
            self.generate("llama", ops=[nan_add])
        self.assertEqual(raised.exception.code, "invalid_request")
        self.assertIn("cannot pick token 0: the logits hold NaN or infinities", raised.exception.message)
        # -inf on all but one token is a finite choice: greedy and sampling both pick that token.
        mask = torch.full((320,), float("-inf"))
        mask[77] = 0.0
        only_77 = [{"op": "set", "hook": "logits", "value": mask, "allow_nonfinite": True}]
        self.assertEqual(self.generate("llama", ops=only_77)["tokens"], [77] * self.NEW)
        self.assertEqual(self.generate("llama", ops=only_77, temperature=0.8, seed=3)["tokens"], [77] * self.NEW)
        mask[77] = float("inf")  # +inf is not a finite choice
        with self.assertRaises(RpcError) as raised:
            self.generate("llama", ops=[dict(only_77[0], value=mask)])
        self.assertIn("cannot pick token 0", raised.exception.message)


class TraceForm(ServedTinyModels):
    """Model.trace, the nnsight-style form, is the same model.run call."""

    ARCHITECTURES = ("qwen2",)
    SEED = 90

    def test_a_trace_records_ops_in_order_and_fills_saved_values(self):
        model = Model(self.modeld.client, "qwen2")
        vector = np.random.default_rng(9).standard_normal(64).astype(np.float32)
        with model.trace([CLEAN, CORRUPT]) as t:
            before = t["blocks.1.hook_resid_post"].save()
            t.add("blocks.1.hook_resid_post", vector, scale=2.0)
            t["blocks.1.attn.hook_z"][1, :, [0, 2]].zero()
            last = t["blocks.1.hook_resid_post"][:, -1].save()
            t["blocks.2.hook_resid_pre"][1, [3]].patch(from_row=0)
        want = model.run(ids=[CLEAN, CORRUPT], ops=[
            {"op": "capture", "hook": "blocks.1.hook_resid_post"},
            {"op": "add", "hook": "blocks.1.hook_resid_post", "vector": vector, "scale": 2.0},
            {"op": "zero", "hook": "blocks.1.attn.hook_z", "rows": [1], "heads": [0, 2]},
            {"op": "capture", "hook": "blocks.1.hook_resid_post", "positions": [-1]},
            {"op": "patch", "hook": "blocks.2.hook_resid_pre", "rows": [1], "positions": [3], "from_row": 0}])
        np.testing.assert_array_equal(t.logits.numpy(), want["logits"].numpy())
        np.testing.assert_array_equal(before.value.numpy(), want["captures"][0][1].numpy())
        np.testing.assert_array_equal(last.value.numpy(), want["captures"][1][1].numpy())
        self.assertEqual(tuple(last.value.shape), (2, 1, 64))
        np.testing.assert_allclose(last.value.numpy()[:, 0], before.value.numpy()[:, -1] + 2.0 * vector, rtol=0, atol=1e-5)

    def test_an_exception_in_the_block_runs_nothing(self):
        model = Model(self.modeld.client, "qwen2")
        with self.assertRaises(KeyError):
            with model.trace(CLEAN) as t:
                saved = t["hook_embed"].save()
                raise KeyError("user code failed")
        self.assertIsNone(saved.value)
        self.assertIsNone(t.result)


def hf_gradients(name, model, prompts, hooks, scalar):
    """transformers' gradients of scalar(logits, ids) at hooks (module_map's modules, layer from each name)."""
    kept, handles = {}, []
    for hook in hooks:
        layer = int(hook.split(".")[1]) if hook.startswith("blocks.") else 0
        module, where, reshape = module_map(name, model, layer)[hook]

        def keep(value, hook=hook, reshape=reshape):
            value.retain_grad()
            kept[hook] = (value, reshape)
        if where == "in":
            handles.append(module.register_forward_pre_hook(
                lambda m, args, kwargs, keep=keep: keep(args[0] if args else kwargs["hidden_states"]), with_kwargs=True))
        else:
            handles.append(module.register_forward_hook(lambda m, args, out, keep=keep: keep(first(out))))
    model.requires_grad_(False)  # only the activations' gradients are wanted
    try:
        ids = torch.tensor(prompts)
        embeds = model.get_input_embeddings()(ids).detach().requires_grad_(True)
        # the embeddings are a leaf that requires grad, so every hooked value after them has a gradient
        logits = model(inputs_embeds=embeds).logits
        scalar(logits, ids).backward()
    finally:
        for h in handles:
            h.remove()
    return {h: (r(v.grad) if r else v.grad).float().numpy() for h, (v, r) in kept.items()}


class ModeldGradients(ServedTinyModels):
    """capture_grad: gradients at hook points of a scalar of the logits, against transformers' autograd."""

    ARCHITECTURES = ("llama", "gemma2")
    SEED = 110

    HOOKS = ["blocks.0.hook_resid_post", "blocks.1.attn.hook_z", "blocks.2.mlp.hook_post", "blocks.1.hook_attn_out"]

    def test_logit_diff_gradients_match_transformers_autograd(self):
        for name in self.models:
            with self.subTest(architecture=name):
                got = Model(self.modeld.client, name).run(
                    ids=[CLEAN, CORRUPT], ops=[{"op": "capture_grad", "hook": h} for h in self.HOOKS],
                    grad_of={"logit_diff": {"tokens": [7, 11], "position": -1}})
                want = hf_gradients(name, self.models[name][1], [CLEAN, CORRUPT], self.HOOKS,
                                    lambda logits, ids: (logits[:, -1, 7] - logits[:, -1, 11]).sum())
                self.assertEqual([h for h, _ in got["grads"]], self.HOOKS)
                for hook, grad in got["grads"]:
                    self.assertEqual(tuple(grad.shape), want[hook].shape)
                    self.assertLess(relative_error(grad.numpy(), want[hook]), 1e-3, hook)
                plain = Model(self.modeld.client, name).run(ids=[CLEAN, CORRUPT])["logits"].numpy()
                self.assertAlmostEqual(got["grad_of_value"], float((plain[:, -1, 7] - plain[:, -1, 11]).sum()), places=3)
                np.testing.assert_allclose(got["logits"].numpy(), plain, rtol=1e-5, atol=1e-5)

    def test_loss_gradient_with_a_selection_matches_transformers(self):
        hook = "blocks.1.hook_resid_pre"
        got = Model(self.modeld.client, "llama").run(
            ids=[CLEAN], ops=[{"op": "capture_grad", "hook": hook, "positions": [2, -1]}], grad_of={"loss": {}})
        want = hf_gradients("llama", self.models["llama"][1], [CLEAN], [hook],
                            lambda logits, ids: torch.nn.functional.cross_entropy(logits[0, :-1], ids[0, 1:]))
        self.assertLess(relative_error(got["grads"][0][1].numpy(), want[hook][:, [2, len(CLEAN) - 1]]), 1e-3)

    def test_bad_gradient_requests_are_refused(self):
        cases = [({"ops": [{"op": "capture_grad", "hook": "blocks.0.hook_resid_post"}]}, "grad_of"),
                 ({"ops": [{"op": "capture", "hook": "hook_embed"}], "grad_of": {"loss": {}}}, "no capture_grad"),
                 ({"ops": [{"op": "capture_grad", "hook": "hook_embed"}], "grad_of": {"logit": {"token": 320}}}, "0 to 319"),
                 ({"ops": [{"op": "capture_grad", "hook": "hook_embed"}], "grad_of": {"kl": {}}}, "unknown target"),
                 ({"ops": [{"op": "capture_grad", "hook": "hook_embed"}],
                   "grad_of": {"logit_diff": {"tokens": [1, 2], "position": 11}}}, "position")]
        for params, words in cases:
            with self.subTest(params=str(params)[:70]):
                with self.assertRaises(RpcError) as raised:
                    self.modeld.client.call("model.run", model="llama", ids=CLEAN, **params)
                self.assertEqual(raised.exception.code, "invalid_request")
                self.assertIn(words, raised.exception.message)
        with self.assertRaises(RpcError) as raised:
            list(Model(self.modeld.client, "llama").generate_stream(CLEAN, max_new_tokens=2,
                                                                    ops=[{"op": "capture_grad", "hook": "hook_embed"}]))
        self.assertIn("capture_grad is for model.run", raised.exception.message)
