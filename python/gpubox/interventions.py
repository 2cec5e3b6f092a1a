"""The intervention spec of model.run (hooks/README.md) from Python values.

encode_ops turns a list of ops whose tensor fields (`value`, `vector`,
`direction`) hold numpy arrays, torch tensors or nested lists into the wire
form: each tensor becomes {"dtype", "shape", "attachment": i} and its bytes the
CALL's i-th attachment, sent as they are (no JSON, no base64).
"""
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from . import tensor_wire

TENSOR_FIELDS = ("value", "vector", "direction")


def _tensor_bytes(value) -> Tuple[str, List[int], Any]:
    """(dtype name, shape, a buffer of the C-order bytes) of a tensor, array or nested
    list, as float32, float16 or bfloat16 (the dtypes of the spec; others become float32)."""
    if type(value).__module__.startswith("torch"):
        import torch
        value = value.detach()
        if value.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            value = value.to(torch.float32)
    else:
        import numpy as np
        value = np.asarray(value)
        if value.dtype not in (np.float32, np.float16):
            value = value.astype(np.float32)
    _, dtype, shape, data = tensor_wire.tensor_bytes(value)
    return dtype, shape, data


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
