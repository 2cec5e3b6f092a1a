"""Continuous batching in gpubox-modeld: concurrent generate requests from
separate connections share one running batch, and each one's output is
identical (greedy, float32, CPU; sampled ones with their seed) to the same
request served alone — its tokens, finish reason and captures — whatever
else is in the batch: other lengths, padded batches, steering and zeroing
ops, captures, stops, sampling, captures and edits of attn.hook_result, and a
request cancelled mid-way. Also: a full queue is refused naming its size, a
request larger than the whole KV cache is refused with its token counts, a
caller that disconnects frees its KV blocks, static (fixed-shape) steps run on
blocks of the same pool, and model.stats shows the batch."""
import threading
import time
import unittest

import numpy as np

from gpubox.client import Client
from gpubox.errors import RpcError
from gpubox.models import Model
from served_models import ServedTinyModels

rng = np.random.default_rng(5)
VECTOR = rng.standard_normal(64).astype(np.float32)


def requests_of_every_kind():
    """(name, prompt, options) of the mixed requests; run_request() sends them."""
    return [
        ("short", [5, 17, 33, 2, 9], dict(max_new_tokens=20, ignore_eos=True)),
        ("padded batch", [[4, 5, 6, 7], [8, 9, 10, 11, 12, 13, 14]], dict(max_new_tokens=16, ignore_eos=True)),
        ("steered", list(range(1, 13)), dict(max_new_tokens=24, ignore_eos=True,
                                             add={"blocks.1.hook_resid_post": (VECTOR, 2.0)})),
        ("captured", [40, 41], dict(max_new_tokens=12, ignore_eos=True, capture=["blocks.0.hook_resid_post"])),
        ("sampled", [7] * 9, dict(max_new_tokens=30, temperature=0.9, top_k=20, seed=5, ignore_eos=True)),
        ("zeroed at the prompt", [3, 1, 4, 1, 5, 9, 2, 6],
         dict(max_new_tokens=18, ignore_eos=True,
              ops=[{"op": "zero", "hook": "blocks.0.hook_resid_post", "positions": [2], "steps": [0]}])),
        ("steered batch", [[11, 12, 13], [14, 15, 16, 17, 18]],
         dict(max_new_tokens=10, ignore_eos=True, add={"blocks.0.hook_resid_mid": (VECTOR, -1.0)})),
        ("long", [20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38],
         dict(max_new_tokens=40, ignore_eos=True)),
        ("eos allowed", [60, 61, 62], dict(max_new_tokens=25)),
        # attn.hook_result: computed for these requests' rows only; an edit re-sums their attention output
        ("head results captured", [50, 51, 52, 53], dict(max_new_tokens=10, ignore_eos=True,
                                                         capture=["blocks.1.attn.hook_result"])),
        ("head results edited", [[4, 5, 6, 7], [8, 9, 10, 11, 12, 13]],
         dict(max_new_tokens=14, ignore_eos=True, ops=[
             {"op": "zero", "hook": "blocks.0.attn.hook_result", "heads": [1]},
             {"op": "scale", "hook": "blocks.2.attn.hook_result", "factor": 3.0, "heads": [0], "rows": [1]},
             {"op": "capture", "hook": "blocks.2.attn.hook_result", "heads": [0]}])),
    ]


def outcome(result):
    """What must be identical: tokens, finish reasons, and each capture's (pass, hook, values)."""
    captures = [(step, name, np.asarray(tensor)) for step, name, tensor in result.get("captures", [])]
    return result["tokens"], result["finish_reason"], captures


class Batching(ServedTinyModels):
    ARCHITECTURES = ("llama", "gpt2")
    SEED = 90

    @classmethod
    def extra_models(cls):
        path = cls.models["llama"][0]
        return [{"name": "one-at-a-time", "path": path, "max_batch": 1, "max_queue": 1},
                {"name": "small-cache", "path": path, "kv_cache_mb": 1}]

    def client(self):
        client = Client("ipc://" + self.modeld.socket)
        self.addCleanup(client.close)
        return client

    def run_request(self, client, model, prompt, options):
        return Model(client, model).generate(prompt, **options)

    def stats(self, model="llama"):
        return self.modeld.client.call("model.stats", model=model)["batching"]

    def assertSameOutcome(self, got, want, name):
        tokens, reasons, captures = outcome(got)
        want_tokens, want_reasons, want_captures = outcome(want)
        self.assertEqual(tokens, want_tokens, name)
        self.assertEqual(reasons, want_reasons, name)
        self.assertEqual([c[:2] for c in captures], [c[:2] for c in want_captures], name)
        for (_, hook, value), (_, _, wanted) in zip(captures, want_captures):
            np.testing.assert_array_equal(value, wanted, err_msg="%s: %s" % (name, hook))

    def test_concurrent_mixed_requests_equal_their_solo_runs(self):
        for model in ("llama", "gpt2"):
            with self.subTest(model=model):
                requests = requests_of_every_kind()
                alone = [self.run_request(self.modeld.client, model, prompt, options) for _, prompt, options in requests]
                # A stop id taken from a solo run ends that request early in the batch too.
                stop_at = alone[0]["tokens"][6]
                requests.append(("stopped", requests[0][1], dict(max_new_tokens=20, ignore_eos=True, stop_ids=[stop_at])))
                alone.append(self.run_request(self.modeld.client, model, requests[-1][1], requests[-1][2]))
                self.assertEqual(alone[-1]["finish_reason"], "stop")
                unsteered = self.run_request(self.modeld.client, model, requests[2][1], dict(max_new_tokens=24, ignore_eos=True))
                self.assertNotEqual(alone[2]["tokens"], unsteered["tokens"])  # the steering op matters
                peak_before = self.stats(model)["peak_batch_rows"]
                results = [None] * len(requests)
                errors = []
                start = threading.Barrier(len(requests) + 1, timeout=60)

                def one(index, client=None):
                    try:
                        client = self.client()
                        start.wait()
                        results[index] = self.run_request(client, model, requests[index][1], requests[index][2])
                    except Exception as error:  # reported below, with the request's name
                        errors.append((requests[index][0], error))

                def cancelled():
                    client = self.client()
                    start.wait()
                    stream = Model(client, model).generate_stream([9] * 30, max_new_tokens=200, ignore_eos=True)
                    for count, _ in enumerate(stream):
                        if count == 3:
                            stream.close()
                            break

                threads = [threading.Thread(target=one, args=(i,)) for i in range(len(requests))]
                threads.append(threading.Thread(target=cancelled))
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join(120)
                self.assertEqual(errors, [])
                for (name, _, _), got, want in zip(requests, results, alone):
                    self.assertSameOutcome(got, want, name)
                stats = self.stats(model)
                self.assertGreater(stats["peak_batch_rows"], max(peak_before, 2), stats)
                self.assertEqual(stats["kv"]["blocks_used"], 0, stats)

    def test_a_full_queue_is_refused_naming_its_size(self):
        long_client, queued_client = self.client(), self.client()
        running = Model(long_client, "one-at-a-time").generate_stream([1, 2, 3], max_new_tokens=200, ignore_eos=True)
        next(running)  # admitted and decoding
        queued = {}
        waiter = threading.Thread(target=lambda: queued.update(result=Model(queued_client, "one-at-a-time").generate(
            [4, 5, 6], max_new_tokens=5, ignore_eos=True)))
        waiter.start()
        deadline = time.monotonic() + 30
        while self.stats("one-at-a-time")["queue_depth"] < 1:
            self.assertLess(time.monotonic(), deadline, "the second request never queued")
            time.sleep(0.005)
        with self.assertRaises(RpcError) as refused:
            self.modeld.client.call("model.generate", model="one-at-a-time", ids=[7, 8], max_new_tokens=5)
        self.assertEqual(refused.exception.code, "unavailable")
        self.assertIn("request queue is full (1 requests waiting, max_queue 1)", refused.exception.message)
        for _ in running:  # the running request ends whole, then the queued one runs
            pass
        waiter.join(60)
        self.assertEqual(len(queued["result"]["tokens"]), 5)
        self.assertEqual(self.stats("one-at-a-time")["queue_depth"], 0)

    def test_a_request_larger_than_the_whole_cache_is_refused_with_its_token_counts(self):
        kv = self.stats("small-cache")["kv"]
        positions = kv["blocks"] * kv["block_tokens"]
        rows = positions // 20 + 1  # each row: 10 prompt + 10 new tokens
        with self.assertRaises(RpcError) as refused:
            self.modeld.client.call("model.generate", model="small-cache", ids=[[3] * 10] * rows, max_new_tokens=10)
        self.assertEqual(refused.exception.code, "invalid_request")
        self.assertIn("needs %d KV cache positions (%d rows × (10 prompt + 10 new tokens))" % (rows * 20, rows),
                      refused.exception.message)
        self.assertIn("whole KV cache of %d positions" % positions, refused.exception.message)
        self.assertEqual(self.stats("small-cache")["kv"]["blocks_used"], 0)
        # What fits still runs.
        self.assertEqual(len(self.modeld.client.call("model.generate", model="small-cache", ids=[3] * 10,
                                                     max_new_tokens=10, ignore_eos=True)["tokens"]), 10)

    def test_a_caller_that_disconnects_frees_its_blocks_and_disturbs_no_one(self):
        want = self.run_request(self.modeld.client, "llama", [8, 6, 4], dict(max_new_tokens=60, ignore_eos=True))
        leaving = Client("ipc://" + self.modeld.socket)
        stream = leaving.stream("model.generate", model="llama", ids=[2] * 20, max_new_tokens=200, ignore_eos=True,
                                stream=True)
        next(iter(stream))
        self.assertGreater(self.stats()["kv"]["blocks_used"], 0)
        staying = {}
        thread = threading.Thread(target=lambda: staying.update(result=self.run_request(
            self.client(), "llama", [8, 6, 4], dict(max_new_tokens=60, ignore_eos=True))))
        thread.start()
        leaving.close()  # disconnects mid-generate
        deadline = time.monotonic() + 30
        while self.stats()["running"] > (1 if thread.is_alive() else 0):
            self.assertLess(time.monotonic(), deadline, "the disconnected request still runs")
            time.sleep(0.005)
        thread.join(60)
        self.assertSameOutcome(staying["result"], want, "the request beside it")
        self.assertEqual(self.stats()["kv"]["blocks_used"], 0)

    def test_static_steps_take_their_cache_from_the_same_pool(self):
        prompt, options = [5, 17, 33, 2, 9, 4], dict(max_new_tokens=12, ignore_eos=True)
        dynamic = self.run_request(self.modeld.client, "small-cache", prompt, options)  # leaves its values in the pool
        # While a fixed-step generation runs, it holds its blocks of the pool: rows × (prompt + new) positions.
        # (200 new tokens: beyond the stream's credit window of 16, it waits for this reader.)
        stream = Model(self.client(), "llama").generate_stream(prompt, decode_steps="fixed", max_new_tokens=200,
                                                               ignore_eos=True)
        next(stream)
        kv = self.stats("llama")["kv"]
        self.assertEqual(kv["blocks_used"], -(-(len(prompt) + 200) // kv["block_tokens"]), kv)
        for _ in stream:
            pass
        self.assertEqual(self.stats("llama")["kv"]["blocks_used"], 0)
        # On blocks another request wrote before: the dynamic steps' tokens.
        fixed = self.run_request(self.modeld.client, "small-cache", prompt, dict(options, decode_steps="fixed"))
        self.assertEqual(fixed["tokens"], dynamic["tokens"])
        # Larger than the pool: refused as the batch's requests are.
        kv = self.stats("small-cache")["kv"]
        positions = kv["blocks"] * kv["block_tokens"]
        rows = positions // 20 + 1
        with self.assertRaises(RpcError) as refused:
            self.modeld.client.call("model.generate", model="small-cache", ids=[[3] * 10] * rows, max_new_tokens=10,
                                    decode_steps="fixed")
        self.assertEqual(refused.exception.code, "invalid_request")
        self.assertIn("needs %d KV cache positions (%d rows × (10 prompt + 10 new tokens))" % (rows * 20, rows),
                      refused.exception.message)

    def test_stats_show_the_batch_and_the_pool(self):
        self.run_request(self.modeld.client, "llama", [1, 2, 3], dict(max_new_tokens=8, ignore_eos=True))
        stats = self.stats()
        for key in ("queue_depth", "running", "batch_rows", "peak_batch_rows", "max_batch", "max_queue",
                    "requests_done", "tokens_per_second", "kv"):
            self.assertIn(key, stats)
        self.assertEqual((stats["max_batch"], stats["max_queue"]), (32, 256))
        self.assertGreater(stats["tokens_per_second"], 0)
        self.assertGreater(stats["requests_done"], 0)
        kv = stats["kv"]
        self.assertEqual(kv["blocks_free"] + kv["blocks_used"], kv["blocks"])
        self.assertEqual(self.stats("small-cache")["kv"]["bytes"] <= 1 << 20, True)


if __name__ == "__main__":
    unittest.main()
