"""A model split over two CPU ranks (tensor_parallel 2: two threads of one
gpubox-modeld, c10d's Gloo between them) against the same model on one device,
served by the same modeld: logits, greedy tokens, every hook point's capture,
the editing ops (a head ablated on each rank included), an fn, an SAE splice,
gradients, concurrent callers, and what each rank holds.

Interpreter: build/venv/bin/python (torch, transformers from PyPI), the
client's Model (python/gpubox/models.py), the tiny random models of
tiny_models.py (4 query heads in 2 KV groups, 128 MLP units, a vocabulary of
320: each rank holds 2 heads, 1 KV group, 64 units and 160 rows).

The bound, SPLIT_BOUND: float32, max |split - one| / max |one|. The ranks
compute the same products as one device; what differs is the order of the
sums: the attention output and the MLP output are each two halves added by
the all-reduce (one device sums all of a row in one pass, in the CPU
kernel's order), so each layer's residual additions differ by a few float32
roundings (2^-24 relative each), and three layers and the final norm carry
them to the logits. Measured here: logits at most 1.1e-6 (gemma2), any hook
point at most 2.7e-6 (gemma3's attention pattern); 1e-5 leaves a margin and
still fails on any real mistake (a wrong head, unit or vocabulary slice mixes
other random weights in: an error of order one).
"""
import os
import shutil
import tempfile
import threading
import time
import unittest

import numpy as np
import torch

import saelens_format
import tiny_models
from gpubox.client import Client, RpcError
from gpubox.models import Model
from modeld_process import Modeld
from served_models import ServedTinyModels
from test_modeld_batching import outcome, requests_of_every_kind
from test_modeld_hooks import relative_error

SPLIT_BOUND = 1e-5
ARCHITECTURES = ["gpt2", "llama", "llama2", "mistral", "qwen2", "gemma2", "gemma3"]
CLEAN = [5, 17, 33, 2, 9, 100, 7, 8, 19, 44, 3]
CORRUPT = [5, 17, 61, 2, 9, 100, 7, 80, 19, 44, 3]


def ablate_first_head(act: torch.Tensor) -> torch.Tensor:
    """The caller's function (an fn op) at attn.hook_z: head 0 zeroed, head 3 doubled."""
    out = act.clone()
    out[:, :, 0] = 0.0
    out[:, :, 3] = out[:, :, 3] * 2.0
    return out


def split_name(name):
    return name + "-split"


class TensorParallelOnCpu(ServedTinyModels):
    ARCHITECTURES = ARCHITECTURES
    SEED = 400

    @classmethod
    def extra_models(cls):
        """Each architecture again, split over two CPU ranks."""
        return [{"name": split_name(name), "path": path, "device": "cpu", "tensor_parallel": 2, "allow_cpu_split": True}
                for name, (path, _) in cls.models.items()]

    def both(self, name):
        return Model(self.modeld.client, name), Model(self.modeld.client, split_name(name))

    def assert_split_close(self, got, want, what):
        self.assertEqual(tuple(got.shape), tuple(want.shape), what)
        finite = np.isfinite(want)
        np.testing.assert_array_equal(np.isfinite(got), finite, what)  # masked where one device masks
        self.assertLess(relative_error(got[finite], want[finite]), SPLIT_BOUND, what)

    def test_logits_and_greedy_tokens_equal_one_device(self):
        for name in ARCHITECTURES:
            with self.subTest(architecture=name):
                one, split = self.both(name)
                want = one.run(ids=[CLEAN, CORRUPT])["logits"].numpy()
                got = split.run(ids=[CLEAN, CORRUPT])["logits"].numpy()
                self.assert_split_close(got, want, "logits")
                tokens = one.generate(CLEAN, max_new_tokens=12, temperature=0)["tokens"]
                self.assertEqual(split.generate(CLEAN, max_new_tokens=12, temperature=0)["tokens"], tokens)
                self.assertEqual(len(tokens), 12)

    def test_streaming_static_steps_and_weights_are_those_of_one_device(self):
        for name in ("gpt2", "llama", "gemma2"):
            with self.subTest(architecture=name):
                one, split = self.both(name)
                want = one.generate(CLEAN, max_new_tokens=8, temperature=0)["tokens"]
                streamed = [step["tokens"][0] for step in split.generate_stream(CLEAN, max_new_tokens=8, temperature=0)
                            if "tokens" in step]
                self.assertEqual(streamed, want)
                # static steps: each rank writes its KV heads at a slot of its cache and attends over all of it
                self.assertEqual(split.generate(CLEAN, max_new_tokens=8, temperature=0, decode_steps="fixed")["tokens"], want)
                # model.weights reads the checkpoint: whole tensors, the split's as one device's
                names = [n for n in one.weights() if n.endswith(("W_Q", "W_O", "W_in", "W_U", "W_E"))][:6]
                self.assertEqual(len(names), 6)
                mine, theirs = split.weights(names), one.weights(names)
                for weight in names:
                    np.testing.assert_array_equal(mine[weight].numpy(), theirs[weight].numpy(), weight)

    def test_every_hook_point_captures_what_one_device_does(self):
        for name in ARCHITECTURES:
            one, split = self.both(name)
            hooks = [h["name"] for h in self.modeld.client.call("model.hooks", model=name)["hooks"]]
            self.assertEqual([h["name"] for h in self.modeld.client.call("model.hooks", model=split_name(name))["hooks"]],
                             hooks)
            want = one.run(ids=[CLEAN, CORRUPT], capture=hooks)["captures"]
            got = split.run(ids=[CLEAN, CORRUPT], capture=hooks)["captures"]
            self.assertEqual([h for h, _ in got], hooks)
            self.assertGreater(len(hooks), 40)
            for (hook, value), (_, wanted) in zip(got, want):
                with self.subTest(architecture=name, hook=hook):
                    self.assert_split_close(value.numpy(), wanted.numpy(), hook)

    def run_edit(self, name, ops, **params):
        """The logits of one device and of the split with ops, after checking the ops change them."""
        one, split = self.both(name)
        want = one.run(ids=[CLEAN, CORRUPT], ops=ops, **params)["logits"].numpy()
        plain = one.run(ids=[CLEAN, CORRUPT])["logits"].numpy()
        self.assertGreater(relative_error(want, plain), 1e-3, "the edit must change the logits to be a test")
        got = split.run(ids=[CLEAN, CORRUPT], ops=ops, **params)["logits"].numpy()
        self.assert_split_close(got, want, "logits with %r" % [op["op"] for op in ops])

    def test_editing_ops_act_where_the_data_lives(self):
        vector = np.random.default_rng(3).standard_normal(64).astype(np.float32)
        for name in ARCHITECTURES:
            with self.subTest(architecture=name, edit="steering"):
                self.run_edit(name, [{"op": "add", "hook": "blocks.1.hook_resid_mid", "vector": vector, "scale": 3.0}])
            with self.subTest(architecture=name, edit="a head ablated on each rank"):
                # heads 0-1 live on rank 0, heads 2-3 on rank 1
                self.run_edit(name, [{"op": "zero", "hook": "blocks.0.attn.hook_z", "heads": [0]},
                                     {"op": "zero", "hook": "blocks.1.attn.hook_v", "heads": [1]},
                                     {"op": "zero", "hook": "blocks.2.attn.hook_z", "heads": [3]}])
            with self.subTest(architecture=name, edit="pattern and MLP units"):
                self.run_edit(name, [{"op": "scale", "hook": "blocks.1.attn.hook_pattern", "factor": 0.25, "heads": [2]},
                                     {"op": "zero", "hook": "blocks.0.mlp.hook_post", "positions": [-1]}])
            with self.subTest(architecture=name, edit="activation patching"):
                self.run_edit(name, [{"op": "patch", "hook": "blocks.1.hook_resid_post", "from_row": 0, "rows": [1]},
                                     {"op": "patch", "hook": "blocks.0.attn.hook_result", "from_row": 0, "rows": [1]}])
            with self.subTest(architecture=name, edit="directional ablation"):
                self.run_edit(name, [{"op": "project_out", "hook": "blocks.%d.hook_resid_post" % l, "direction": vector}
                                     for l in range(3)])

    def test_the_callers_function_runs_on_whole_values(self):
        for name in ARCHITECTURES:
            with self.subTest(architecture=name):
                one, split = self.both(name)
                want = one.run(ids=[CLEAN, CORRUPT], hooks={"blocks.1.attn.hook_z": ablate_first_head})["logits"].numpy()
                got = split.run(ids=[CLEAN, CORRUPT], hooks={"blocks.1.attn.hook_z": ablate_first_head})["logits"].numpy()
                self.assert_split_close(got, want, "fn at hook_z")

    def test_an_sae_splice_equals_one_device(self):
        path, _, _ = saelens_format.make_sae(self.dir, "res1", 64, hook="blocks.1.hook_resid_post", seed=9)
        for name in ("llama", "gemma2"):
            with self.subTest(architecture=name):
                one, split = self.both(name)
                ops = [one.sae("res1", path=path).splice(), {"op": "capture", "hook": "blocks.1.hook_resid_post"}]
                split.sae("res1", path=path)
                want = one.run(ids=[CLEAN], ops=ops)
                got = split.run(ids=[CLEAN], ops=ops)
                self.assert_split_close(got["logits"].numpy(), want["logits"].numpy(), "logits after the splice")
                self.assert_split_close(got["blocks.1.hook_resid_post"].numpy(), want["blocks.1.hook_resid_post"].numpy(),
                                        "the spliced residual")

    def test_gradients_equal_one_device(self):
        hooks = ["blocks.0.hook_resid_post", "blocks.1.attn.hook_z", "blocks.2.mlp.hook_post", "blocks.1.hook_attn_out",
                 "hook_embed"]
        for name in ARCHITECTURES:
            with self.subTest(architecture=name):
                one, split = self.both(name)
                params = dict(ids=[CLEAN, CORRUPT], ops=[{"op": "capture_grad", "hook": h} for h in hooks],
                              grad_of={"logit_diff": {"tokens": [7, 11], "position": -1}})
                want = one.run(**params)
                got = split.run(**params)
                self.assertEqual([h for h, _ in got["grads"]], hooks)
                for (hook, grad), (_, wanted) in zip(got["grads"], want["grads"]):
                    self.assert_split_close(grad.numpy(), wanted.numpy(), "gradient at " + hook)
                self.assertAlmostEqual(got["grad_of_value"], want["grad_of_value"], places=4)

    def test_eight_concurrent_callers_get_their_solo_generations(self):
        """Continuous batching on the split model (each rank a KV pool of its heads): eight of
        test_modeld_batching's mixed requests (steered, captured, sampled, padded, head results
        edited) at once give exactly what each gives alone, bit for bit."""
        requests = requests_of_every_kind()[:8]
        model = split_name("llama")
        alone = [Model(self.modeld.client, model).generate(prompt, **options) for _, prompt, options in requests]
        peak_before = self.modeld.client.call("model.stats", model=model)["batching"]["peak_batch_rows"]
        start = threading.Barrier(len(requests), timeout=60)
        results, errors = [None] * len(requests), []

        def one(index):
            client = Client("ipc://" + self.modeld.socket)
            try:
                start.wait()
                results[index] = Model(client, model).generate(requests[index][1], **requests[index][2])
            except Exception as error:  # reported below, with the request's name
                errors.append((requests[index][0], error))
            finally:
                client.close()
        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(requests))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        self.assertEqual(errors, [])
        for (name, _, _), got, want in zip(requests, results, alone):
            got_tokens, got_reasons, got_captures = outcome(got)
            tokens, reasons, captures = outcome(want)
            self.assertEqual((got_tokens, got_reasons), (tokens, reasons), name)
            for (_, hook, value), (_, _, wanted) in zip(got_captures, captures):
                np.testing.assert_array_equal(value, wanted, err_msg="%s: %s" % (name, hook))
        self.assertGreater(self.modeld.client.call("model.stats", model=model)["batching"]["peak_batch_rows"],
                           max(peak_before, 1))

    def test_each_rank_holds_half_of_the_weights(self):
        for name in ARCHITECTURES:
            with self.subTest(architecture=name):
                one = self.modeld.client.call("model.info", model=name)
                split = self.modeld.client.call("model.info", model=split_name(name))
                self.assertEqual(split["devices"], ["cpu", "cpu"])
                self.assertEqual(split["tensor_parallel"], 2)
                self.assertEqual(one["tensor_parallel"], 1)
                self.assertEqual(split["parameters"], one["parameters"])
                whole = one["memory_bytes"]
                for held in split["rank_memory_bytes"]:
                    # everything split but the norms (and GPT-2's position table), which each rank holds whole
                    self.assertGreater(held, 0.45 * whole)
                    self.assertLess(held, 0.56 * whole)
                listed = {m["name"]: m for m in self.modeld.client.call("model.list")["models"]}
                self.assertEqual(listed[split_name(name)]["devices"], ["cpu", "cpu"])

    def test_splits_that_do_not_work_are_refused_and_load_nothing(self):
        path = self.models["llama"][0]
        cases = [({"tensor_parallel": 3, "allow_cpu_split": True},
                  ["4 attention heads", "2 KV groups", "3 ranks", "splits that work: 1, 2"]),
                 ({"tensor_parallel": 2}, ["allow_cpu_split"])]
        before = [m["name"] for m in self.modeld.client.call("model.list")["models"]]
        for extra, words in cases:
            with self.subTest(extra=extra):
                try:
                    self.modeld.client.call("model.load", params=dict({"name": "refused", "path": path, "device": "cpu"},
                                                                      **extra))
                    status = self.modeld.wait_settled()
                    entry = [m for m in status["models"] if m["name"] == "refused"][0]
                    self.assertEqual(entry["state"], "failed")
                    message = entry["error"]
                    self.modeld.client.call("model.unload", model="refused")
                except RpcError as error:
                    message = str(error)
                for word in words:
                    self.assertIn(word, message)
        self.assertEqual([m["name"] for m in self.modeld.client.call("model.list")["models"]], before)


class ARankThatFails(unittest.TestCase):
    """A rank of a split model fails (GPUBOX_MODELD_TEST_FAIL_RANK=1: rank 1 throws once, after
    its collectives of a pass, as a rank that dies between them would): the call gets
    unavailable naming the rank at once, nothing waits for a timeout, the model is down
    until it has loaded again in the same modeld, and the other models serve throughout."""

    def test_the_model_goes_down_naming_the_rank_and_loads_again(self):
        directory = tempfile.mkdtemp(prefix="modeld-split-fail-")
        self.addCleanup(shutil.rmtree, directory, True)
        path, _ = tiny_models.make(directory, "llama", seed=430)
        os.environ["GPUBOX_MODELD_TEST_FAIL_RANK"] = "1"
        try:
            modeld = Modeld([{"name": "one", "path": path},
                             {"name": "split", "path": path, "device": "cpu", "tensor_parallel": 2, "allow_cpu_split": True}],
                            os.path.join(directory, "run"))
        finally:
            del os.environ["GPUBOX_MODELD_TEST_FAIL_RANK"]
        self.addCleanup(modeld.close)
        modeld.wait_all_ready()
        want = Model(modeld.client, "one").run(ids=[CLEAN])["logits"].numpy()
        started = time.monotonic()
        with self.assertRaises(RpcError) as failed:
            Model(modeld.client, "split").run(ids=[CLEAN])
        self.assertLess(time.monotonic() - started, 10)
        self.assertEqual(failed.exception.code, "unavailable")
        self.assertIn("rank 1 on cpu failed: injected failure", failed.exception.message)
        np.testing.assert_array_equal(Model(modeld.client, "one").run(ids=[CLEAN])["logits"].numpy(), want)
        with self.assertRaises(RpcError) as down:
            Model(modeld.client, "split").generate(CLEAN, max_new_tokens=2)
        self.assertEqual(down.exception.code, "unavailable")
        self.assertIn("is down: rank 1 on cpu failed", down.exception.message)
        self.assertIn("loading again", down.exception.message)
        modeld.wait_all_ready()
        got = Model(modeld.client, "split").run(ids=[CLEAN])["logits"].numpy()
        self.assertLess(relative_error(got, want), SPLIT_BOUND)
        self.assertEqual(modeld.client.call("modeld.status")["pid"], modeld.process.pid)
        self.assertIn('model "split" is down (rank 1 on cpu failed', modeld.log_text())


if __name__ == "__main__":
    unittest.main()
