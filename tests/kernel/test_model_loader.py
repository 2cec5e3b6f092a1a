"""kernel/model_loader.py on its own (Debian's python3 with python3-torch): the
safetensors reader against well-formed and malformed files, the torchscript
loader, the transformers/peft code path against stand-in transformers and peft
modules (the real ones are checked by tests/device/check_transformers_loader.sh),
devices, dtypes and the report/model_info text with hidden models."""
import json
import os
import shutil
import struct
import sys
import tempfile
import types
import unittest

import torch

from tiny_models import TinyNet, safetensors_bytes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "kernel"))
import model_loader  # noqa: E402


def entry(path, loader, **overrides):
    e = {"var_name": "model", "tokenizer_var": "", "loader": loader, "device": "cpu", "dtype": "",
         "hidden": False, "is_peft": False, "path": path, "base_model": "", "name": "test-model"}
    e.update(overrides)
    return e


class LoaderTestCase(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="gpubox-loader-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def write(self, name, data):
        path = os.path.join(self.dir, name)
        with open(path, "wb") as f:
            f.write(data)
        return path


class SafetensorsReaderTest(LoaderTestCase):
    def test_reads_every_dtype_shape_and_metadata(self):
        tensors = {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3),
                   "h": torch.tensor([1.5, -2.0], dtype=torch.float16),
                   "b": torch.tensor([1.0, 2.0], dtype=torch.bfloat16),
                   "steps": torch.tensor(7, dtype=torch.int64),  # a scalar: shape []
                   "empty": torch.zeros(0, 4, dtype=torch.float32),
                   "mask": torch.tensor([True, False, True]),
                   "bytes": torch.tensor([0, 255], dtype=torch.uint8)}
        path = self.write("m.safetensors", safetensors_bytes(tensors, metadata={"format": "pt"}))
        read, metadata = model_loader.read_safetensors(path, torch)
        self.assertEqual(metadata, {"format": "pt"})
        self.assertEqual(list(read), list(tensors), "header order kept")
        for name, expected in tensors.items():
            self.assertEqual(read[name].dtype, expected.dtype, name)
            self.assertEqual(tuple(read[name].shape), tuple(expected.shape), name)
            self.assertTrue(torch.equal(read[name], expected), name)

    def assert_refused(self, data, *fragments):
        path = self.write("bad.safetensors", data)
        with self.assertRaises(model_loader.SafetensorsError) as caught:
            model_loader.read_safetensors(path, torch)
        for fragment in fragments:
            self.assertIn(fragment, str(caught.exception))

    def test_malformed_files_are_refused_with_what_is_wrong(self):
        good = safetensors_bytes({"w": torch.ones(2, 2)})
        self.assert_refused(b"", "shorter than the 8-byte header length")
        self.assert_refused(b"\x01\x02\x03", "shorter than the 8-byte header length")
        self.assert_refused(struct.pack("<Q", 2**63) + b"{}", "over the limit")
        self.assert_refused(struct.pack("<Q", 1000) + b"{}", "runs past the end")
        self.assert_refused(good[:-3], "run past the 13 bytes of data")  # truncated data
        self.assert_refused(good + b"\0\0", "but the file holds 18")
        self.assert_refused(struct.pack("<Q", 4) + b"[1] ", "not a JSON object")
        self.assert_refused(struct.pack("<Q", 3) + b"{x}", "not JSON")
        self.assert_refused(struct.pack("<Q", 2) + b"\xff\xfe", "not UTF-8")

    def test_bad_entries_are_refused_naming_the_tensor(self):
        def one(info, data=b"\0" * 8):
            text = json.dumps({"t": info}).encode()
            return struct.pack("<Q", len(text)) + text + data
        self.assert_refused(one({"dtype": "F128", "shape": [2], "data_offsets": [0, 8]}), "tensor 't'", "F128")
        self.assert_refused(one({"dtype": "F32", "shape": [-1], "data_offsets": [0, 8]}), "shape")
        self.assert_refused(one({"dtype": "F32", "shape": [True], "data_offsets": [0, 8]}), "shape")
        self.assert_refused(one({"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}), "data_offsets")
        self.assert_refused(one({"dtype": "F32", "shape": [2], "data_offsets": [0, 80]}), "run past the 8 bytes")
        self.assert_refused(one({"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}), "needs 12")
        self.assert_refused(one({"dtype": "F32", "shape": [2], "data_offsets": [0, 8], "x": 1}), "unknown key 'x'")
        self.assert_refused(one({"dtype": "F32", "shape": [2]}), "data_offsets")
        self.assert_refused(one("F32"), "expected an object")
        text = b'{"__metadata__": {"a": 1}}'
        self.assert_refused(struct.pack("<Q", len(text)) + text, "__metadata__")

    def test_gaps_overlaps_and_duplicates_are_refused(self):
        def two(a, b, data_len):
            text = json.dumps({"a": {"dtype": "U8", "shape": [a[1] - a[0]], "data_offsets": a},
                               "b": {"dtype": "U8", "shape": [b[1] - b[0]], "data_offsets": b}}).encode()
            return struct.pack("<Q", len(text)) + text + b"\0" * data_len
        self.assert_refused(two([0, 4], [2, 6], 6), "tensor 'b'", "expected 4")  # overlap
        self.assert_refused(two([0, 2], [4, 6], 6), "tensor 'b'", "expected 2")  # gap
        self.assert_refused(two([2, 4], [4, 6], 6), "tensor 'a'", "expected 0")  # hole at the start
        text = b'{"a": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]}, "a": {}}'
        self.assert_refused(struct.pack("<Q", len(text)) + text, "appears twice")


class SafetensorsMutationTest(LoaderTestCase):
    """Random corruptions of a good file: each one reads or fails with SafetensorsError, nothing else."""

    def test_random_mutations_never_raise_anything_else(self):
        import random
        good = safetensors_bytes({"a": torch.ones(3, 2), "b": torch.tensor([1, 2], dtype=torch.int64)},
                                 metadata={"k": "v"})
        rng = random.Random(1234)
        outcomes = {"read": 0, "refused": 0}
        for i in range(1500):
            data = bytearray(good)
            for _ in range(rng.randint(1, 4)):
                kind = rng.random()
                at = rng.randrange(len(data))
                if kind < 0.5:
                    data[at] = rng.randrange(256)
                elif kind < 0.75:
                    del data[at:at + rng.randint(1, 16)]
                else:
                    data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
            path = self.write("m%d.safetensors" % (i % 4), bytes(data))
            try:
                model_loader.read_safetensors(path, torch)
                outcomes["read"] += 1
            except model_loader.SafetensorsError:
                outcomes["refused"] += 1
        self.assertGreater(outcomes["refused"], 1000, outcomes)


class LoadOneTest(LoaderTestCase):
    def test_torchscript_loads_with_dtype_and_reports_its_shape(self):
        path = os.path.join(self.dir, "tiny.pt")
        torch.jit.script(TinyNet()).save(path)
        item, values = model_loader.load_one(entry(path, "torchscript", dtype="float64", var_name="net"))
        self.assertEqual(item["status"], "loaded", item)
        self.assertEqual(item["parameters"], 4 * 3 + 3)
        self.assertEqual(item["dtype"], "torch.float64")
        self.assertEqual(item["device"], "cpu")
        self.assertIn("TinyNet", item["type"])
        net = values["net"]
        self.assertEqual(net(torch.ones(1, 4, dtype=torch.float64)).shape, (1, 3))
        self.assertFalse(net.training, "loaded in eval mode")

    def test_safetensors_dtype_converts_only_floating_point_tensors(self):
        path = self.write("w.safetensors", safetensors_bytes({"w": torch.ones(2, 3), "n": torch.tensor([3])}))
        item, values = model_loader.load_one(entry(path, "safetensors", dtype="float16"))
        self.assertEqual(item["status"], "loaded", item)
        self.assertEqual(values["model"]["w"].dtype, torch.float16)
        self.assertEqual(values["model"]["n"].dtype, torch.int64)
        self.assertEqual(item["parameters"], 7)
        self.assertEqual(item["type"], "dict of 2 tensors")

    def test_cuda_without_a_gpu_is_a_clear_failure(self):
        if torch.cuda.is_available():
            self.skipTest("this machine has a GPU")
        path = self.write("w.safetensors", safetensors_bytes({"w": torch.ones(1)}))
        item, values = model_loader.load_one(entry(path, "safetensors", device="cuda"))
        self.assertEqual(item["status"], "failed")
        self.assertIn("'cuda' was requested, but no CUDA GPU is available", item["error"])
        self.assertEqual(values, {})

    def test_a_hidden_model_reports_neither_name_nor_path_even_in_errors(self):
        path = os.path.join(self.dir, "run-gpubox-models-1234")  # the agent's placed path; missing here
        item, _ = model_loader.load_one(entry(path, "torchscript", hidden=True, name=None))
        self.assertEqual(item["status"], "failed")
        self.assertNotIn("name", item)
        self.assertNotIn("path", item)
        self.assertNotIn(path, item["error"])
        self.assertIn("<hidden>", item["error"])

    def test_load_models_goes_on_after_a_failure_and_formats_model_info(self):
        good = self.write("w.safetensors", safetensors_bytes({"w": torch.ones(1000)}))
        bad = self.write("bad.pt", b"not a zip")
        sent = []
        namespace = model_loader.load_models(
            [entry(bad, "torchscript", var_name="broken", name="broken-model"),
             entry(good, "safetensors", var_name="weights", name="weights-v1"),
             entry(good, "safetensors", var_name="secret", name=None, hidden=True)],
            display=lambda data, raw: sent.append((data, raw)), mime="application/x-test")
        self.assertNotIn("broken", namespace)
        self.assertEqual(set(namespace), {"weights", "secret", "model_info"})
        text = namespace["model_info"]
        self.assertEqual(repr(text), str(text), "a cell ending with model_info shows the text itself")
        self.assertIn("Pre-loaded Models:", text)
        self.assertIn("- weights: weights-v1 (safetensors, %s)" % good, text)
        self.assertIn("parameters: 1,000", text)
        self.assertIn("- broken: broken-model", text)
        self.assertIn("FAILED to load: RuntimeError", text)
        self.assertIn("- secret: hidden model (safetensors)", text)
        self.assertEqual(text.count(good), 1, "the hidden model's path is not shown")
        (data, raw), = sent
        self.assertTrue(raw)
        report = data["application/x-test"]
        self.assertEqual([m["status"] for m in report["models"]], ["failed", "loaded", "loaded"])
        self.assertNotIn("path", report["models"][2])
        self.assertEqual(report["model_info"], str(text))

    def test_an_error_the_agent_found_is_reported_without_loading(self):
        item, values = model_loader.load_one(entry("", "torchscript", hidden=True, error="cannot hide it"))
        self.assertEqual((item["status"], item["error"], values), ("failed", "cannot hide it", {}))


class FakeTransformersTest(LoaderTestCase):
    """The transformers/peft path with stand-ins that record how they are called."""

    def setUp(self):
        super().setUp()
        self.calls = []
        calls = self.calls

        class AutoModelForCausalLM:
            @staticmethod
            def from_pretrained(source, **kwargs):
                calls.append(("causal", source, kwargs))
                if "encoder" in source:
                    raise ValueError("Unrecognized configuration class for this kind of AutoModel")
                return torch.nn.Linear(2, 2).to(kwargs.get("torch_dtype") or torch.float32)

        class AutoModel:
            @staticmethod
            def from_pretrained(source, **kwargs):
                calls.append(("bare", source, kwargs))
                return torch.nn.Linear(3, 1)

        class Tokenizer:
            def __init__(self, source):
                self.source = source

        class AutoTokenizer:
            @staticmethod
            def from_pretrained(source):
                calls.append(("tokenizer", source))
                if source.endswith("adapter"):
                    raise OSError("no tokenizer files in the adapter")
                return Tokenizer(source)

        class PeftModel(torch.nn.Module):
            def __init__(self, base, adapter):
                super().__init__()
                self.base, self.adapter = base, adapter

            @classmethod
            def from_pretrained(cls, base, adapter):
                calls.append(("peft", adapter))
                model = cls(base, adapter)
                model.peft_config = {"default": types.SimpleNamespace(base_model_name_or_path="/home/me/secret-base")}
                return model

        fake = types.ModuleType("transformers")
        fake.AutoModelForCausalLM, fake.AutoModel, fake.AutoTokenizer = AutoModelForCausalLM, AutoModel, AutoTokenizer
        peft = types.ModuleType("peft")
        peft.PeftModel = PeftModel
        saved = {name: sys.modules.get(name) for name in ("transformers", "peft")}
        sys.modules.update(transformers=fake, peft=peft)

        def restore():
            for name, module in saved.items():
                if module is None:
                    sys.modules.pop(name, None)
                else:
                    sys.modules[name] = module
        self.addCleanup(restore)

    def test_causal_lm_with_dtype_and_tokenizer(self):
        item, values = model_loader.load_one(entry("/m/llm", "transformers", dtype="bfloat16", tokenizer_var="tok"))
        self.assertEqual(item["status"], "loaded", item)
        self.assertEqual(self.calls[0], ("causal", "/m/llm", {"torch_dtype": torch.bfloat16}))
        self.assertEqual(values["model"].weight.dtype, torch.bfloat16)
        self.assertEqual(values["tok"].source, "/m/llm")
        self.assertEqual(item["tokenizer_type"], "Tokenizer")
        self.assertEqual(item["parameters"], 6)

    def test_a_model_that_is_not_a_causal_lm_loads_as_the_bare_model(self):
        item, values = model_loader.load_one(entry("/m/encoder", "transformers"))
        self.assertEqual(item["status"], "loaded", item)
        self.assertEqual([c[0] for c in self.calls], ["causal", "bare"])
        self.assertEqual(self.calls[1][2], {}, "no dtype given: none passed")
        self.assertNotIn("tokenizer_type", item)

    def test_peft_adapter_on_its_base_with_the_base_tokenizer(self):
        item, values = model_loader.load_one(entry("/m/adapter", "transformers", is_peft=True, base_model="/m/base",
                                                   tokenizer_var="tokenizer"))
        self.assertEqual(item["status"], "loaded", item)
        self.assertEqual(self.calls[:2], [("causal", "/m/base", {}), ("peft", "/m/adapter")])
        self.assertEqual(values["model"].adapter, "/m/adapter")
        self.assertEqual(values["tokenizer"].source, "/m/base", "the adapter has none: the base's")
        self.assertEqual(item["type"], "PeftModel")

    def test_a_hidden_adapter_does_not_name_the_base_it_was_trained_on(self):
        item, values = model_loader.load_one(entry("/run/gpubox/models/ab12", "transformers", is_peft=True, hidden=True,
                                                   base_model="/run/gpubox/models/cd34"))
        self.assertEqual(item["status"], "loaded", item)
        self.assertEqual(values["model"].peft_config["default"].base_model_name_or_path, "/run/gpubox/models/cd34")
        visible, values = model_loader.load_one(entry("/m/adapter", "transformers", is_peft=True, base_model="/m/base"))
        self.assertEqual(values["model"].peft_config["default"].base_model_name_or_path, "/home/me/secret-base",
                         "a visible adapter keeps its own config")

    def test_without_transformers_the_failure_says_so(self):
        sys.modules["transformers"] = None  # import fails
        item, _ = model_loader.load_one(entry("/m/llm", "transformers"))
        self.assertEqual(item["status"], "failed")
        self.assertIn("needs the transformers package", item["error"])


if __name__ == "__main__":
    unittest.main()
