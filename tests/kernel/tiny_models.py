"""Test models for the model-loader suites: a tiny torch module and a
safetensors writer that is independent of the reader under test."""
import json
import struct

import torch


class TinyNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(x)


def safetensors_bytes(tensors, metadata=None, header_override=None):
    """The bytes of a safetensors file holding tensors (header_override replaces its JSON header)."""
    codes = {torch.float32: "F32", torch.float16: "F16", torch.int64: "I64", torch.bfloat16: "BF16",
             torch.uint8: "U8", torch.bool: "BOOL"}
    header, blobs, at = {}, [], 0
    for name, t in tensors.items():
        raw = t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": codes[t.dtype], "shape": list(t.shape), "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    if metadata is not None:
        header["__metadata__"] = metadata
    if header_override is not None:
        header = header_override
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def write_safetensors(path, tensors):
    with open(path, "wb") as f:
        f.write(safetensors_bytes(tensors))
