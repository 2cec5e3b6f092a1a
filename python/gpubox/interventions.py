"""The intervention spec of model.run (hooks/README.md) from Python values.

encode_ops turns a list of ops whose tensor fields (`value`, `vector`,
`direction`, an fn op's `extra` values) hold numpy arrays, torch tensors or
nested lists into the wire form: each tensor becomes {"dtype", "shape",
"attachment": i} and its bytes the CALL's i-th attachment, sent as they are (no
JSON, no base64); an fn op's function (not a name) becomes its TorchScript archive, also an attachment.
"""
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from . import tensor_wire, user_fn

TENSOR_FIELDS = ("value", "vector", "direction")


def _tensor_bytes(value, where: str) -> Tuple[str, List[int], Any]:
    """(dtype name, shape, a buffer of the C-order bytes) of a tensor, array or nested
    list, as float32, float16 or bfloat16 (the dtypes of the spec; other real numbers
    become float32). ValueError naming where (the op and field) for what is not real
    numbers: complex (the imaginary part would be lost), strings, objects."""
    if type(value).__module__.startswith("torch"):
        import torch
        value = value.detach()
        if value.is_complex():
            raise ValueError("%s: a complex tensor (%s); the model host takes real numbers: send .real or .abs()"
                             % (where, str(value.dtype).replace("torch.", "")))
        if value.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            value = value.to(torch.float32)
    else:
        import numpy as np
        try:
            value = np.asarray(value)
        except ValueError as e:  # ragged nested lists
            raise ValueError("%s: not a tensor: %s" % (where, e)) from None
        if value.dtype.kind == "c":
            raise ValueError("%s: a complex array (%s); the model host takes real numbers: send .real or abs()"
                             % (where, value.dtype.name))
        if value.dtype.kind not in "biuf":
            raise ValueError("%s: expected real numbers, got an array of %s (%r)"
                             % (where, value.dtype.name, value.reshape(-1)[:1].tolist()[0] if value.size else value))
        if value.dtype not in (np.float32, np.float16):
            value = value.astype(np.float32)
    _, dtype, shape, data = tensor_wire.tensor_bytes(value)
    return dtype, shape, data


def encode_ops(ops: Iterable[dict] = (), capture: Sequence[str] = (),
               add: Optional[Dict[str, Any]] = None) -> Tuple[List[dict], List[Any]]:
    """(wire ops, attachments). capture: hook names to capture (after ops); add:
    {hook: vector or (vector, scale)} steering shorthand (before ops)."""
    wire, attachments = [], []

    def tensor(value, where):
        dtype, shape, data = _tensor_bytes(value, where)
        attachments.append(data)
        return {"dtype": dtype, "shape": shape, "attachment": len(attachments) - 1}

    for hook, spec in (add or {}).items():
        vector, scale = spec if isinstance(spec, tuple) else (spec, 1.0)
        wire.append({"op": "add", "hook": hook, "vector": tensor(vector, "add[%r]" % hook), "scale": float(scale)})
    for index, op in enumerate(ops):
        op = dict(op)
        where = "ops[%d] (%s at %s)" % (index, op.get("op"), op.get("hook"))
        for field in TENSOR_FIELDS:
            if field in op and not (isinstance(op[field], dict) and "attachment" in op[field]):
                op[field] = tensor(op[field], "%s.%s" % (where, field))
        if op.get("op") == "fn":
            if not isinstance(op.get("fn"), (str, dict)):  # sent with the call (a name: model.fn_load's)
                attachments.append(user_fn.archive(op["fn"]))
                op["fn"] = {"attachment": len(attachments) - 1}
            if "extra" in op:
                op["extra"] = {k: v if isinstance(v, dict) and "attachment" in v else tensor(v, "%s.extra.%s" % (where, k))
                               for k, v in op["extra"].items()}
        wire.append(op)
    wire.extend({"op": "capture", "hook": hook} for hook in capture)
    return wire, attachments


# ---- SAE ops (an SAE loaded with Model.sae / model.sae_load; hook defaults to the SAE's) -------------

def _sae_op(kind: str, sae: str, where: dict, **fields) -> dict:
    op = {"op": kind, "sae": sae}
    op.update({k: v for k, v in fields.items() if v is not None})
    for key in ("hook", "rows", "positions", "steps"):
        if where.get(key) is not None:
            value = where[key]
            op[key] = value if isinstance(value, str) or key == "hook" else [int(i) for i in value]
    return op


def sae_capture(sae: str, top_k: Optional[int] = None, **where) -> dict:
    """Feature activations of sae at its hook: dense [.., d_sae] under "sae:NAME", or with
    top_k the k largest per position as "sae:NAME:indices" (int64) and "sae:NAME:values"."""
    return _sae_op("sae_capture", sae, where, top_k=None if top_k is None else int(top_k))


def sae_steer(sae: str, features: Sequence[int], scale: float = 1.0, **where) -> dict:
    """Adds scale × W_dec[f] for each feature f to the activation."""
    return _sae_op("sae_steer", sae, where, features=[int(f) for f in features], scale=float(scale))


def sae_ablate(sae: str, features: Sequence[int], **where) -> dict:
    """Zeroes features, decodes, and adds the SAE's error back (no edit: the activation unchanged)."""
    return _sae_op("sae_ablate", sae, where, features=[int(f) for f in features])


def sae_set(sae: str, features: Sequence[int], values, **where) -> dict:
    """Sets features to values (a number, or one per feature), decodes, adds the error back."""
    values = float(values) if isinstance(values, (int, float)) else [float(v) for v in values]
    return _sae_op("sae_set", sae, where, features=[int(f) for f in features], values=values)


def fn(hook: str, function, extra: Optional[Dict[str, Any]] = None, **where) -> dict:
    """Runs function (TorchScript-scriptable; user_fn.py) at hook on the selected part of the activation."""
    return user_fn.op(hook, function, extra, **where)


def sae_splice(sae: str, **where) -> dict:
    """Replaces the activation by the SAE's reconstruction (without the error term)."""
    return _sae_op("sae_splice", sae, where)
