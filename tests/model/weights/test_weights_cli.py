"""`gpubox weights` against files written by the real safetensors library and
by transformers' save_pretrained: the same tensors, dtypes, shapes, sha256
and values as Python computes, and the corrupt files Python refuses refused.

Runs with build/venv/bin/python (scripts/setup_python.sh); GPUBOX_CLI names the binary.
"""
import hashlib
import json
import os
import struct
import subprocess
import tempfile
import unittest

import numpy as np
import safetensors
import safetensors.numpy
from safetensors import safe_open

CLI = os.environ.get("GPUBOX_CLI", "gpubox")


def run(*args):
    done = subprocess.run([CLI, "weights", *args], capture_output=True, text=True, timeout=120)
    return done.returncode, done.stdout, done.stderr


def run_json(*args):
    code, out, err = run(*args, "--json")
    if code != 0:
        raise AssertionError(f"gpubox weights {args} exited {code}: {out} {err}")
    return json.loads(out)


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def torch_bytes(tensor):
    import torch
    return tensor.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def python_refuses(path):
    try:
        with safe_open(path, "np") as f:
            for name in f.keys():
                f.get_tensor(name)
    except Exception:  # noqa: BLE001 - any refusal counts
        return True
    return False


class WeightsCliTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory(prefix="gpubox-weights-py-")
        self.addCleanup(self.dir.cleanup)

    def path(self, name):
        return os.path.join(self.dir.name, name)

    def assert_listing_matches(self, listing, expected):
        """expected: name -> (dtype, shape, raw bytes)."""
        got = {t["name"]: t for t in listing["tensors"]}
        self.assertEqual(sorted(got), sorted(expected))
        for name, (dtype, shape, raw) in expected.items():
            self.assertEqual(got[name]["dtype"], dtype, name)
            self.assertEqual(got[name]["shape"], list(shape), name)
            self.assertEqual(got[name]["bytes"], len(raw), name)
            self.assertEqual(got[name]["sha256"], sha256(raw), name)

    def test_numpy_dtypes_and_metadata(self):
        rng = np.random.default_rng(7)
        arrays = {
            "f64": rng.standard_normal((3, 2)),
            "f32": rng.standard_normal((4, 5)).astype(np.float32),
            "f16": rng.standard_normal((7,)).astype(np.float16),
            "i64": rng.integers(-2**62, 2**62, size=(2, 3), dtype=np.int64),
            "i32": rng.integers(-2**31, 2**31 - 1, size=(5,), dtype=np.int32),
            "i16": rng.integers(-2**15, 2**15 - 1, size=(2, 2), dtype=np.int16),
            "i8": rng.integers(-128, 127, size=(9,), dtype=np.int8),
            "u8": rng.integers(0, 255, size=(3, 1, 2), dtype=np.uint8),
            "u16": rng.integers(0, 2**16 - 1, size=(4,), dtype=np.uint16),
            "u32": rng.integers(0, 2**32 - 1, size=(4,), dtype=np.uint32),
            "u64": np.array([0, 2**64 - 1, 12345678901234567890], dtype=np.uint64),
            "flags": np.array([True, False, True]),
            "scalar": np.array(3.25, dtype=np.float32),
            "empty": np.zeros((0, 4), dtype=np.float32),
        }
        path = self.path("numpy.safetensors")
        safetensors.numpy.save_file(arrays, path, metadata={"format": "np", "note": "ünïcode"})
        names = {"f64": "F64", "f32": "F32", "f16": "F16", "i64": "I64", "i32": "I32", "i16": "I16", "i8": "I8",
                 "u8": "U8", "u16": "U16", "u32": "U32", "u64": "U64", "flags": "BOOL", "scalar": "F32",
                 "empty": "F32"}
        listing = run_json(path)
        self.assert_listing_matches(
            listing, {k: (names[k], a.shape, np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes())
                      for k, a in arrays.items()})
        self.assertEqual(listing["files"][0]["metadata"], {"format": "np", "note": "ünïcode"})
        with safe_open(path, "np") as f:
            offsets_in_order = [t["offset"] for t in listing["tensors"]]
            self.assertEqual(offsets_in_order, sorted(offsets_in_order))
            self.assertEqual(listing["total_bytes"], sum(f.get_tensor(k).nbytes for k in f.keys()))

        for name, array in arrays.items():
            count = array.size
            if count == 0:
                continue
            indices = sorted({0, count - 1, count // 2})
            shown = run_json(path, "--tensor", name, "--indices", *map(str, indices))
            self.assertEqual(shown["name"], name)
            flat = array.reshape(-1)
            for item, index in zip(shown["values"], indices):
                self.assertEqual(item["index"], index)
                expected = flat[index].item()
                self.assertEqual(item["value"], expected, f"{name}[{index}]")
                self.assertEqual(type(item["value"]), type(expected), f"{name}[{index}]")
            # Text mode prints the same values.
            code, out, _ = run(path, "--tensor", name, "--indices", str(indices[-1]))
            self.assertEqual(code, 0)
            text = out.strip().split(" = ")[1]
            expected = flat[indices[-1]].item()
            if isinstance(expected, bool):
                self.assertEqual(text, "true" if expected else "false")
            elif isinstance(expected, int):
                self.assertEqual(int(text), expected)
            else:
                self.assertEqual(float(text), expected)

        summary = run_json(path, "--tensor", "f32")
        self.assertEqual(summary["elements"], 20)
        self.assertEqual(summary["min"], float(arrays["f32"].min()))
        self.assertEqual(summary["max"], float(arrays["f32"].max()))
        self.assertAlmostEqual(summary["mean"], float(arrays["f32"].astype(np.float64).mean()), places=12)

    def test_torch_half_types(self):
        import torch
        torch.manual_seed(3)
        tensors = {
            "bf16": torch.randn(5, 3).to(torch.bfloat16),
            "f16": torch.randn(4).to(torch.float16),
            "f32": torch.randn(2, 2, 2),
            "i64": torch.arange(-5, 5, dtype=torch.int64),
            "special": torch.tensor([float("inf"), float("-inf"), float("nan"), -0.0, 1e-40], dtype=torch.bfloat16),
        }
        names = {"bf16": "BF16", "f16": "F16", "f32": "F32", "i64": "I64", "special": "BF16"}
        if hasattr(torch, "float8_e4m3fn"):
            tensors["e4m3"] = (torch.randn(6) * 10).to(torch.float8_e4m3fn)
            tensors["e5m2"] = (torch.randn(6) * 1000).to(torch.float8_e5m2)
            names.update(e4m3="F8_E4M3", e5m2="F8_E5M2")
        import safetensors.torch
        path = self.path("torch.safetensors")
        safetensors.torch.save_file(tensors, path, metadata={"format": "pt"})
        self.assert_listing_matches(run_json(path), {k: (names[k], t.shape, torch_bytes(t)) for k, t in tensors.items()})
        for name, tensor in tensors.items():
            count = tensor.numel()
            indices = list(range(count))
            shown = run_json(path, "--tensor", name, "--indices", *map(str, indices))
            flat = tensor.reshape(-1).double() if tensor.dtype.is_floating_point else tensor.reshape(-1)
            for item, index in zip(shown["values"], indices):
                expected = flat[index].item()
                value = item["value"]
                if isinstance(expected, float) and expected != expected:
                    self.assertEqual(value, "nan")
                elif expected in (float("inf"), float("-inf")):
                    self.assertEqual(value, "inf" if expected > 0 else "-inf")
                else:
                    self.assertEqual(value, expected, f"{name}[{index}]")

    def test_sharded_gpt2_checkpoint(self):
        import torch
        from transformers import GPT2Config, GPT2LMHeadModel
        torch.manual_seed(0)
        model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=64))
        out = self.path("gpt2")
        model.save_pretrained(out, max_shard_size="20KB")
        with open(os.path.join(out, "model.safetensors.index.json")) as f:
            weight_map = json.load(f)["weight_map"]
        shards = sorted(set(weight_map.values()))
        self.assertGreater(len(shards), 1)
        expected = {}
        for shard in shards:
            with safe_open(os.path.join(out, shard), "pt") as f:
                for name in f.keys():
                    t = f.get_tensor(name)
                    expected[name] = ("F32", t.shape, torch_bytes(t))
        self.assertEqual(sorted(expected), sorted(weight_map))
        listing = run_json(out)
        self.assert_listing_matches(listing, expected)
        self.assertEqual([os.path.basename(f["path"]) for f in listing["files"]], shards)
        for t in listing["tensors"]:
            self.assertEqual(os.path.basename(t["file"]), weight_map[t["name"]])

        state = model.state_dict()
        name = "transformer.h.1.attn.c_attn.weight"
        flat = state[name].reshape(-1)
        indices = [0, 1, flat.numel() - 1, 777]
        shown = run_json(out, "--tensor", name, "--indices", *map(str, indices))
        self.assertEqual([v["value"] for v in shown["values"]], [flat[i].double().item() for i in indices])

        # A shard that escapes the directory is refused before anything is opened.
        index_path = os.path.join(out, "model.safetensors.index.json")
        with open(index_path) as f:
            index = json.load(f)
        index["weight_map"][name] = "../" + weight_map[name]
        with open(index_path, "w") as f:
            json.dump(index, f)
        code, _, err = run(out)
        self.assertEqual(code, 1, err)
        self.assertIn("not a file inside the model directory", err)

    def test_refuses_what_python_refuses(self):
        arrays = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.arange(4, dtype=np.int64)}
        good = self.path("good.safetensors")
        safetensors.numpy.save_file(arrays, good)
        with open(good, "rb") as f:
            raw = f.read()
        (length,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8:8 + length])
        data = raw[8 + length:]

        def with_header(h, body=data, pad=True):
            text = json.dumps(h).encode()
            return struct.pack("<Q", len(text)) + text + body

        def edit(change):
            h = json.loads(json.dumps(header))
            change(h)
            return with_header(h)

        # name -> (content, what our message says)
        variants = {
            "truncated": (raw[:-3], "run past the data section"),
            "short": (raw[:5], "too short"),
            "huge_length": (struct.pack("<Q", 2**62) + raw[8:], "over the cap"),
            "length_past_end": (struct.pack("<Q", len(raw)) + raw[8:], "runs past the end of the file"),
            "not_json": (struct.pack("<Q", 5) + b"hello" + data, "not valid JSON"),
            "nul_after_json": (raw[:8 + length - 1] + b"\0" + data, "NUL byte"),
            "trailing_bytes": (raw + b"\0\0\0\0", "belong to no tensor"),
            "size_mismatch": (edit(lambda h: h["a"].update(shape=[2, 2])), "its shape and dtype make"),
            "overlap": (edit(lambda h: h["a"].update(data_offsets=[h["b"]["data_offsets"][0] + 8,
                                                                   h["b"]["data_offsets"][0] + 32])), "overlap"),
            "unknown_dtype": (edit(lambda h: h["a"].update(dtype="F12")), "unknown dtype 'F12'"),
            "negative_shape": (edit(lambda h: h["a"].update(shape=[-2, -3])), "negative"),
            "metadata_int": (edit(lambda h: h.update(__metadata__={"x": 1})), "__metadata__ 'x'"),
            "offset_past_end": (edit(lambda h: h["b"].update(data_offsets=[24, 4000])), "past the data section"),
        }
        for name, (content, says) in variants.items():
            path = self.path(name + ".safetensors")
            with open(path, "wb") as f:
                f.write(content)
            self.assertTrue(python_refuses(path), f"{name}: the safetensors library accepts it")
            code, out, err = run(path)
            self.assertEqual(code, 1, f"{name}: {out} {err}")
            self.assertIn(path, err, name)
            self.assertIn(says, err, name)
        # What the library accepts, so do we (leading whitespace before the JSON).
        padded = self.path("padded.safetensors")
        text = b"  " + json.dumps(header).encode()
        with open(padded, "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text + data)
        self.assertFalse(python_refuses(padded))
        self.assertEqual(len(run_json(padded)["tensors"]), 2)
        # Stricter than the library by choice: extra keys in an entry.
        extra = self.path("extra.safetensors")
        with open(extra, "wb") as f:
            f.write(edit(lambda h: h["a"].update(note="x")))
        self.assertFalse(python_refuses(extra))
        code, _, err = run(extra)
        self.assertEqual(code, 1)
        self.assertIn("unexpected key 'note'", err)

    def test_usage_errors(self):
        path = self.path("x.safetensors")
        safetensors.numpy.save_file({"w": np.ones((2, 2), dtype=np.float32)}, path)
        code, _, err = run(path, "--tensor", "nope")
        self.assertEqual(code, 2)
        self.assertIn("'nope'", err)
        code, _, err = run(path, "--tensor", "w", "--indices", "0", "4")
        self.assertEqual(code, 2)
        self.assertIn("index 4 is out of range for tensor 'w' (4 elements)", err)
        code, out, _ = run(path, "--tensor", "w", "--indices", "9", "--json")
        self.assertEqual(code, 2)
        self.assertEqual(json.loads(out)["error"]["exit_code"], 2)
        code, _, err = run(path, "--indices", "0")
        self.assertEqual(code, 2)
        code, _, err = run(self.path("missing.safetensors"))
        self.assertEqual(code, 2)
        pickle = self.path("pytorch_model.bin")
        with open(pickle, "wb") as f:
            f.write(b"\x80\x04K\x01.")
        code, _, err = run(pickle)
        self.assertEqual(code, 2)
        self.assertIn("pickle", err)
        code, out, _ = run(path)
        self.assertEqual(code, 0)
        self.assertIn("w", out)
        self.assertIn(sha256(np.ones((2, 2), dtype=np.float32).tobytes()), out)


if __name__ == "__main__":
    unittest.main()
