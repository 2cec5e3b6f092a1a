"""The intervention spec of model.run (hooks/README.md) from Python values.

encode_ops turns a list of ops whose tensor fields (`value`, `vector`,
`direction`) hold numpy arrays, torch tensors or nested lists into the wire
form: each tensor becomes {"dtype", "shape", "attachment": i} and its bytes the
CALL's i-th attachment, sent as they are (no JSON, no base64).
"""
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

TENSOR_FIELDS = ("value", "vector", "direction")


def _tensor_bytes(value) -> Tuple[str, List[int], Any]:
    """(dtype name, shape, a buffer of the C-order bytes) of a tensor, array or nested list."""
    if type(value).__module__.startswith("torch"):
        import torch
        tensor = value.detach().to("cpu").contiguous()
        if tensor.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            tensor = tensor.to(torch.float32)
        name = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}[tensor.dtype]
        raw = tensor.view(torch.int16) if tensor.dtype == torch.bfloat16 else tensor
        return name, list(tensor.shape), memoryview(raw.numpy()).cast("B")
    import numpy as np
    array = np.asarray(value)
    if array.dtype not in (np.float32, np.float16):
        array = array.astype(np.float32)
    array = np.ascontiguousarray(array.astype(array.dtype.newbyteorder("<"), copy=False))
    return ("float16" if array.dtype == np.float16 else "float32"), list(array.shape), memoryview(array).cast("B")


def encode_ops(ops: Iterable[dict] = (), capture: Sequence[str] = (),
               add: Optional[Dict[str, Any]] = None) -> Tuple[List[dict], List[Any]]:
    """(wire ops, attachments). capture: hook names to capture (after ops); add:
    {hook: vector or (vector, scale)} steering shorthand (before ops)."""
    wire, attachments = [], []

    def tensor(value):
        dtype, shape, data = _tensor_bytes(value)
        attachments.append(data)
        return {"dtype": dtype, "shape": shape, "attachment": len(attachments) - 1}

    for hook, spec in (add or {}).items():
        vector, scale = spec if isinstance(spec, tuple) else (spec, 1.0)
        wire.append({"op": "add", "hook": hook, "vector": tensor(vector), "scale": float(scale)})
    for op in ops:
        op = dict(op)
        for field in TENSOR_FIELDS:
            if field in op and not (isinstance(op[field], dict) and "attachment" in op[field]):
                op[field] = tensor(op[field])
        wire.append(op)
    wire.extend({"op": "capture", "hook": hook} for hook in capture)
    return wire, attachments
