"""Writes the seed inputs of fuzz_safetensors: small safetensors files, good
and subtly bad, and index.json files, made by hand (no library needed).
  python3 tests/fuzz/make_safetensors_corpus.py
"""
import json
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "fuzz_safetensors")


def file_of(header, data=b""):
    text = header if isinstance(header, bytes) else json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(text)) + text + data


def entry(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


SEEDS = {
    "empty_header": file_of({}),
    "one_f32": file_of({"w": entry("F32", [2], 0, 8)}, struct.pack("<2f", 1.0, -2.5)),
    "mixed": file_of({"__metadata__": {"format": "pt"}, "a": entry("BF16", [2, 2], 0, 8),
                      "b": entry("I64", [], 8, 16), "c": entry("F8_E4M3", [3], 16, 19),
                      "d": entry("BOOL", [0, 5], 19, 19)}, bytes(range(19))),
    "all_dtypes": file_of({name: entry(name, [1], 8 * i, 8 * i + size) if size == 8 else
                           entry(name, [8 // size], 8 * i, 8 * i + 8)
                           for i, (name, size) in enumerate([("F64", 8), ("F32", 4), ("F16", 2), ("I32", 4),
                                                             ("I16", 2), ("I8", 1), ("U8", 1), ("U16", 2),
                                                             ("U32", 4), ("U64", 8), ("F8_E5M2", 1),
                                                             ("F8_E8M0", 1)])}, bytes(96)),
    "hole": file_of({"w": entry("F32", [1], 4, 8)}, bytes(8)),
    "overlap": file_of({"a": entry("F32", [2], 0, 8), "b": entry("F32", [2], 4, 12)}, bytes(12)),
    "duplicate": file_of(b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
                         b'"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}', b"xy"),
    "overflow": file_of({"a": entry("F32", [2**32, 2**32], 0, 0)}),
    "length_past_end": struct.pack("<Q", 100) + b"{}",
    # The same target feeds its input to the index.json parser.
    "index": json.dumps({"metadata": {"total_size": 8}, "weight_map": {
        "a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}).encode(),
    "index_escape": json.dumps({"weight_map": {"a": "../x.safetensors"}}).encode(),
}

os.makedirs(OUT, exist_ok=True)
for name, content in SEEDS.items():
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(content)
