"""The Python client's model methods (gpubox/models.py) against the real agent
and modeld: logits equal to transformers' on the same checkpoint, generations
token-equal to its greedy generate, tensors as torch (in the venv) or numpy
(Debian's python3, which has no torch)."""

import importlib.util
import os
import unittest

import numpy as np

from model_harness import FIXTURE, ModelHostTestCase, gpubox

HAS_TORCH = importlib.util.find_spec("torch") is not None


def as_numpy(tensor):
    return tensor.numpy() if HAS_TORCH else tensor


class ModelClientTest(ModelHostTestCase):
    def setUp(self):
        self.model = self.client.model("tiny")

    def test_list_and_info(self):
        (entry,) = [m for m in self.client.models() if m["name"] == "tiny"]
        self.assertEqual(entry["state"], "ready")
        self.assertEqual(entry["bytes_loaded"], entry["bytes_total"])
        info = self.model.info()
        self.assertEqual(info["architecture"], "llama")
        self.assertEqual(info["vocab_size"], 320)
        self.assertEqual(info["layers"], 3)
        self.assertTrue(info["tokenizer"])
        self.assertIn(self.client.gpu_info()["source"], ("nvml", "nvidia-smi", "none"))

    def test_forward_logits_equal_transformers(self):
        out = self.model.forward(ids=self.refs["prompt_ids"])
        logits = out["logits"]
        if HAS_TORCH:
            import torch
            self.assertIsInstance(logits, torch.Tensor)
            self.assertEqual(logits.dtype, torch.float32)
        else:
            self.assertIsInstance(logits, np.ndarray)
        self.assertEqual(tuple(logits.shape), (2, 6, 320))
        self.assertEqual(out["lengths"], [6, 3])
        self.assertEqual(out["padding"], "left")
        logits = as_numpy(logits)
        for row, length in enumerate(out["lengths"]):
            expected = np.load(os.path.join(FIXTURE, "logits%d.npy" % row))
            got = logits[row, logits.shape[1] - length:]  # left padding
            np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())

    def test_forward_last_only_and_model_dtype(self):
        out = self.model.forward(ids=self.refs["prompt_ids"][0], last_only=True, logits_dtype="model")
        self.assertEqual(tuple(out["logits"].shape), (1, 1, 320))
        expected = np.load(os.path.join(FIXTURE, "logits0.npy"))[-1]
        np.testing.assert_allclose(as_numpy(out["logits"])[0, 0], expected, rtol=1e-4, atol=1e-5)

    def test_bfloat16_without_torch_becomes_float32_numpy(self):
        # A bfloat16 tensor on the wire: 1.0, -2.5, and 3.140625 (exact in bfloat16).
        import struct
        values = [1.0, -2.5, 3.140625]
        frame = b"".join(struct.pack("<f", v)[2:] for v in values)
        tensor = gpubox.tensor_from_wire({"dtype": "bfloat16", "shape": [3]}, frame)
        got = [float(v) for v in (tensor.float() if HAS_TORCH else tensor)]
        self.assertEqual(got, values)

    def test_generate_equals_transformers_greedy(self):
        result = self.model.generate(self.refs["generate_ids"], max_new_tokens=self.refs["new_tokens"], ignore_eos=True)
        self.assertEqual(result["tokens"], self.refs["greedy"])
        self.assertEqual(result["prompt_tokens"], len(self.refs["generate_ids"]))
        self.assertEqual(result["finish_reason"], "length")

    def test_generate_stream_yields_each_step(self):
        steps = []
        stream = self.model.generate_stream(self.refs["generate_ids"], max_new_tokens=5, ignore_eos=True)
        while True:
            try:
                steps.append(next(stream))
            except StopIteration as end:
                result = end.value
                break
        self.assertEqual([s["step"] for s in steps], list(range(5)))
        self.assertEqual([s["tokens"][0] for s in steps], self.refs["greedy"][:5])
        self.assertEqual("".join(s["text"][0] for s in steps), result["text"])
        self.assertEqual(result["tokens"], self.refs["greedy"][:5])

    def test_your_own_function_through_the_agent_equals_the_native_op(self):
        """hooks={hook: fn}: model.fn_load's archive and the run that names it go through the agent.
        With torch the client scripts fn_example.double itself; without, it sends the archive of it
        that make_fixture.py saved (an archive's bytes need no torch)."""
        if HAS_TORCH:
            from fn_example import double
        else:
            with open(self.refs["double_fn"], "rb") as f:
                double = f.read()
        hook = "blocks.1.hook_resid_post"
        mine = self.model.run(ids=self.refs["prompt_ids"], hooks={hook: double})["logits"]
        native = self.model.run(ids=self.refs["prompt_ids"], ops=[{"op": "scale", "hook": hook, "factor": 2.0}])["logits"]
        np.testing.assert_array_equal(mine.numpy(), native.numpy())
        self.assertFalse(np.array_equal(mine.numpy(), self.model.forward(ids=self.refs["prompt_ids"])["logits"].numpy()))

    def test_tokenize_detokenize_and_text_prompts(self):
        tokens = self.model.tokenize("Hello")
        self.assertEqual(tokens["ids"], [72, 101, 108, 108, 111])
        self.assertEqual(tokens["offsets"][0], [0, 1])
        self.assertEqual(self.model.detokenize(tokens["ids"]), "Hello")
        by_text = self.model.forward(text="Hello", last_only=True)["logits"]
        by_ids = self.model.forward(ids=tokens["ids"], last_only=True)["logits"]
        np.testing.assert_array_equal(as_numpy(by_text), as_numpy(by_ids))

    def test_ids_are_integers_in_the_client_and_the_model_host(self):
        with self.assertRaises(ValueError) as caught:
            self.model.run(ids=[1.5, 2.0])
        self.assertEqual(str(caught.exception), "ids[0]: 1.5 is not a token id (token ids are integers)")
        with self.assertRaises(ValueError):
            self.model.generate([[3, 4], [5, 6.0]], max_new_tokens=1)
        with self.assertRaises(gpubox.RpcError) as raised:
            self.client.call("model.run", model="tiny", ids=[3, 1.5])
        self.assertEqual(raised.exception.code, "invalid_request")
        self.assertIn("ids[1]: 1.5 is not a token id (token ids are integers)", raised.exception.message)

    def test_a_complex_tensor_is_refused_naming_the_op_and_field(self):
        hook = "blocks.0.hook_resid_post"
        complex_vector = np.ones(64, dtype=np.complex64) * (1 + 2j)
        with self.assertRaises(ValueError) as caught:
            self.model.run(ids=[3, 4], add={hook: complex_vector})
        self.assertIn("add['%s']: a complex array (complex64)" % hook, str(caught.exception))
        if HAS_TORCH:
            import torch
            with self.assertRaises(ValueError) as caught:
                self.model.run(ids=[3, 4], ops=[{"op": "set", "hook": hook, "value": torch.ones(64, dtype=torch.complex64)}])
            self.assertIn("ops[0] (set at %s).value: a complex tensor (complex64)" % hook, str(caught.exception))

    def test_a_string_tensor_is_refused_naming_the_op_and_field(self):
        hook = "blocks.0.hook_resid_post"
        with self.assertRaises(ValueError) as caught:
            self.model.run(ids=[3, 4], ops=[{"op": "add", "hook": hook, "vector": ["up"] * 64}])
        self.assertIn("ops[0] (add at %s).vector: expected real numbers, got an array of str" % hook, str(caught.exception))

    def test_a_nan_option_is_named_nan(self):  # JSON would write null
        with self.assertRaises(gpubox.RpcError) as raised:
            self.model.generate([3, 4], max_new_tokens=2, temperature=1.0, top_p=float("nan"))
        self.assertIn("top_p: expected a number from 0 to 1, got nan", raised.exception.message)
        self.assertEqual(len(self.model.generate([3, 4], max_new_tokens=2, ignore_eos=True)["tokens"]), 2)  # and it serves on

    def test_unknown_model_is_not_found(self):
        with self.assertRaises(gpubox.RpcError) as caught:
            self.client.model("nope").info()
        self.assertEqual(caught.exception.code, "not_found")
        with self.assertRaises(gpubox.RpcError) as caught:
            self.client.model("nope").wait_ready()
        self.assertEqual(caught.exception.code, "not_found")


if __name__ == "__main__":
    unittest.main()
