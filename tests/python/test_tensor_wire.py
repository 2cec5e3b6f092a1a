"""python/gpubox/tensor_wire.py, the one tensor codec of the client, the serve worker, interventions and models:
round trips of dtypes and shapes through the served form (to_wire, msgpack, from_wire) and the model host's form
(encode_ops, tensor_from_wire), the bytes on the wire spelled out, and clear refusals of headers that do not describe
their bytes. numpy on Debian's /usr/bin/python3; the torch cases (bfloat16 included) in the venv, where
GPUBOX_TEST_TORCH=1 makes a missing torch a failure."""

import os
import struct
import sys
import unittest

import msgpack
import numpy as np

import agent_harness  # noqa: F401  (puts gpubox on sys.path when needed)
from gpubox import _msgpack, models, served, tensor_wire
from gpubox.errors import RpcError
from gpubox.interventions import encode_ops
from gpubox.tensor_wire import TENSOR_KEY, TensorWireError

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from prerequisite import requires  # noqa: E402

try:
    import torch
except ImportError:
    torch = None
    if os.environ.get("GPUBOX_TEST_TORCH") == "1":
        raise

DTYPES = ("float32", "float16", "float64", "int8", "int16", "int32", "int64", "uint8", "bool", "complex64")
SHAPES = ((), (0,), (3,), (2, 3, 4), (1, 0, 5))


def send(value, torch_kinds=None):
    """value through the served form as the two sides see it: to_wire, msgpack bytes, from_wire on plain frames."""
    frames, keep = [], []
    body = _msgpack.packb(tensor_wire.to_wire(value, frames, keep))
    return tensor_wire.from_wire(_msgpack.unpackb(body), [bytes(f) for f in frames], torch_kinds)


class ServedNumpy(unittest.TestCase):
    def test_round_trips_every_dtype_and_shape(self):
        rng = np.random.default_rng(3)
        for dtype in DTYPES:
            for shape in SHAPES:
                with self.subTest(dtype=dtype, shape=shape):
                    array = np.asarray(rng.standard_normal(shape) * 50).astype(dtype)
                    got = send({"x": [array]}, torch_kinds=())["x"][0]
                    self.assertIsInstance(got, np.ndarray)
                    # A 0-d array goes as shape [1], as it always has (numpy.ascontiguousarray).
                    self.assertEqual((got.dtype, got.shape), (array.dtype, array.shape or (1,)))
                    np.testing.assert_array_equal(got.reshape(shape), array)

    def test_the_bytes_on_the_wire(self):
        frames, keep = [], []
        wire = tensor_wire.to_wire([np.arange(6, dtype=">i4").reshape(2, 3)[:, ::2]], frames, keep)
        self.assertEqual(wire, [{TENSOR_KEY: {"kind": "numpy", "dtype": "int32", "shape": [2, 2], "attachments": [0]}}])
        self.assertEqual(bytes(frames[0]), struct.pack("<4i", 0, 2, 3, 5))  # C order, little-endian
        self.assertEqual(_msgpack.packb(wire), msgpack.packb(wire, use_bin_type=True))

    def test_a_large_tensor_spans_frames(self):
        saved = tensor_wire.FRAME_BYTES
        tensor_wire.FRAME_BYTES = 8
        try:
            frames, keep = [], []
            wire = tensor_wire.to_wire(np.arange(5, dtype="<f4"), frames, keep)
            self.assertEqual(wire[TENSOR_KEY]["attachments"], [0, 1, 2])
            np.testing.assert_array_equal(tensor_wire.from_wire(wire, [bytes(f) for f in frames], ()),
                                          np.arange(5, dtype="<f4"))
            with self.assertRaisesRegex(ValueError, "cannot be sent in one message"):
                tensor_wire.to_wire(np.zeros(8 * tensor_wire.MAX_ATTACHMENTS + 1, "u1"), [], [])
        finally:
            tensor_wire.FRAME_BYTES = saved

    def test_plain_values_pass_and_others_are_named(self):
        value = {"s": "t", "b": b"\x00", "n": [None, True, 2, 2.5], "g": np.int64(7)}
        self.assertEqual(send(value), dict(value, g=7))
        with self.assertRaisesRegex(TypeError, "a value of type object cannot be sent"):
            tensor_wire.to_wire([object()], [], [])

    def test_bfloat16_without_torch_is_float32(self):
        halves = np.array([0x3F80, 0xC000, 0x7F80], "<u2")  # 1.0, -2.0, inf
        got = tensor_wire.tensor_from_bytes("bfloat16", [3], halves.tobytes())
        np.testing.assert_array_equal(got, np.array([1.0, -2.0, np.inf], "<f4"))


class Refusals(unittest.TestCase):
    def test_bad_headers_get_clear_errors(self):
        four = struct.pack("<f", 1.0)
        for dtype, shape, data, words in (("float99", [1], four, "unknown tensor dtype 'float99'"),
                                          (None, [1], four, "unknown tensor dtype None"),
                                          ("object", [1], four, "unknown tensor dtype 'object'"),
                                          ("float32", [2, 3], four * 5, "has 24 bytes, not the 20"),
                                          ("bfloat16", [3], four, "has 6 bytes, not the 4"),
                                          ("float32", "1", four, "shape must be a list"),
                                          ("float32", [-1], four, "shape must be a list")):
            for module in (None, torch) if torch is not None else (None,):
                with self.subTest(dtype=dtype, shape=shape, torch=module is not None):
                    with self.assertRaisesRegex(TensorWireError, words):
                        tensor_wire.tensor_from_bytes(dtype, shape, data, module)

    def test_attachments_that_are_not_there(self):
        wire = {TENSOR_KEY: {"kind": "numpy", "dtype": "float32", "shape": [1], "attachments": [5]}}
        with self.assertRaisesRegex(TensorWireError, r"names the attachments \[5\]; the message has 1"):
            tensor_wire.from_wire(wire, [b"\0" * 4])

    def test_the_client_reports_a_bad_result_as_internal(self):
        wire = {TENSOR_KEY: {"kind": "torch", "dtype": "nope", "shape": [1], "attachments": [0]}}
        with self.assertRaises(RpcError) as caught:
            served.from_wire(wire, [b"\0" * 4])
        self.assertEqual(caught.exception.code, "internal")
        self.assertIn("unknown tensor dtype 'nope'", caught.exception.message)


class InterventionTensors(unittest.TestCase):
    def test_intervention_tensors_decode_as_models_reads_them(self):
        vector = np.linspace(-1, 1, 6).reshape(2, 3)  # float64: sent as float32
        wire, attachments = encode_ops([{"op": "set", "hook": "h", "value": vector}], capture=["c"],
                                       add={"a": ([1, 2], 3.0)})
        self.assertEqual([op["op"] for op in wire], ["add", "set", "capture"])
        self.assertEqual(wire[1]["value"], {"dtype": "float32", "shape": [2, 3], "attachment": 1})
        self.assertEqual(bytes(attachments[1]), vector.astype("<f4").tobytes())
        got = models.tensor_from_wire(wire[1]["value"], bytes(attachments[1]))
        np.testing.assert_array_equal(np.asarray(got), vector.astype("<f4"))
        half = encode_ops([{"op": "set", "hook": "h", "value": np.ones(2, "float16")}])[0][0]["value"]
        self.assertEqual(half["dtype"], "float16")


@requires(torch is not None, "torch does not import (setup.sh installs python3-torch; the venv's test, GPUBOX_TEST_TORCH=1, runs these too)")
class Torch(unittest.TestCase):
    def test_round_trips_with_bfloat16(self):
        for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.uint8, torch.bool):
            for shape in SHAPES:
                with self.subTest(dtype=dtype, shape=shape):
                    tensor = (torch.randn(shape) * 50).to(dtype)
                    got = send([tensor])[0]
                    self.assertEqual((got.dtype, tuple(got.shape)), (dtype, tuple(shape)))
                    self.assertTrue(torch.equal(got, tensor))

    def test_the_worker_keeps_numpy_as_numpy_and_the_client_makes_torch(self):
        array = np.arange(3, dtype="<f4")
        self.assertIsInstance(send(array, torch_kinds=("torch",)), np.ndarray)
        self.assertIsInstance(send(array), torch.Tensor)
        self.assertIsInstance(send(torch.ones(2), torch_kinds=("torch",)), torch.Tensor)

    def test_bfloat16_bytes_read_without_torch(self):
        tensor = torch.tensor([[1.5, -3.0], [0.0078125, 1e30]], dtype=torch.bfloat16)
        frames, keep = [], []
        wire = tensor_wire.to_wire(tensor, frames, keep)
        self.assertEqual(wire[TENSOR_KEY]["dtype"], "bfloat16")
        self.assertEqual(bytes(frames[0]), tensor.view(torch.int16).numpy().tobytes())
        got = tensor_wire.from_wire(wire, [bytes(frames[0])], ())
        np.testing.assert_array_equal(got, tensor.float().numpy())

    def test_intervention_bfloat16_and_a_non_contiguous_tensor(self):
        tensor = torch.arange(12, dtype=torch.float32).reshape(3, 4).t().to(torch.bfloat16).requires_grad_()
        wire, attachments = encode_ops([{"op": "add", "hook": "h", "vector": tensor}])
        self.assertEqual(wire[0]["vector"], {"dtype": "bfloat16", "shape": [4, 3], "attachment": 0})
        self.assertEqual(bytes(attachments[0]), tensor.detach().contiguous().view(torch.int16).numpy().tobytes())
        got = models.tensor_from_wire(wire[0]["vector"], bytes(attachments[0]))
        self.assertTrue(torch.equal(got, tensor.detach()))
        wire, _ = encode_ops([{"op": "add", "hook": "h", "vector": torch.ones(2, dtype=torch.int32)}])
        self.assertEqual(wire[0]["vector"]["dtype"], "float32")


class WorkerMsgpack(unittest.TestCase):
    def test_the_worker_options(self):
        text = "lone \udc80 surrogate"
        packed = _msgpack.packb(text, unicode_errors="surrogatepass")
        self.assertEqual(_msgpack.unpackb(packed, unicode_errors="surrogatepass"), text)
        with self.assertRaises(UnicodeEncodeError):
            _msgpack.packb(text)
        deep = [0]
        for _ in range(150):
            deep = [deep]
        self.assertEqual(_msgpack.unpackb(_msgpack.packb(deep, max_depth=None), max_depth=None), deep)
        with self.assertRaisesRegex(ValueError, "nested deeper than 100"):
            _msgpack.packb(deep)


if __name__ == "__main__":
    unittest.main()
