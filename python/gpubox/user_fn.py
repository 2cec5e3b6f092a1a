"""The fn op's functions on the client side: a Python callable at a hook point,
scripted with TorchScript, saved to bytes and sent to the model host (docs/interventions
in hooks/README.md, "fn").

    def ablate_head(act: torch.Tensor) -> torch.Tensor:   # blocks.0.attn.hook_z: [batch, pos, heads, d_head]
        act[:, :, 3] = 0
        return act
    model.run(ids, hooks={"blocks.0.attn.hook_z": ablate_head})

A function takes (act) or (act, extra: Dict[str, Tensor]) and returns the
replacement (same shape and dtype), None (unchanged), or (Optional[Tensor],
Dict[str, Tensor]) to also capture tensors by name. archive() scripts a
callable (or takes a ScriptFunction / ScriptModule / nn.Module / bytes as they
are). It keeps the bytes per plain function object (a function defined again,
as a notebook cell run again defines it, is scripted again); a module, whose
weights may change between calls, is saved every time.
"""
import hashlib
import io
import types
import warnings
import weakref
from typing import Any, Dict, Optional

_ARCHIVES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


class FnScriptError(TypeError):
    """TorchScript could not script the function: its message says what it refused."""


def archive(fn) -> bytes:
    """The torch.jit.save bytes of fn (a callable, nn.Module, torch.jit.script/trace result, or
    the bytes themselves). FnScriptError naming the function and what TorchScript refused."""
    if isinstance(fn, (bytes, bytearray, memoryview)):
        return bytes(fn)
    if fn in _ARCHIVES:  # only plain functions are kept
        return _ARCHIVES[fn]
    import torch
    with warnings.catch_warnings():
        # torch.jit is deprecated from torch 2.10 on, and still the one format LibTorch runs without Python
        # (hooks/README.md, "fn": why TorchScript).
        warnings.simplefilter("ignore", DeprecationWarning)
        if isinstance(fn, (torch.jit.ScriptFunction, torch.jit.ScriptModule)):
            scripted = fn
        else:
            try:
                scripted = torch.jit.script(fn)
            except Exception as error:  # TorchScript's frontend raises several types
                name = getattr(fn, "__qualname__", None) or type(fn).__name__
                raise FnScriptError("fn %s: TorchScript cannot script it: %s" % (name, str(error).strip())) from error
        buffer = io.BytesIO()
        torch.jit.save(scripted, buffer)
    data = buffer.getvalue()
    if isinstance(fn, types.FunctionType):
        _ARCHIVES[fn] = data
    return data


def name_of(data: bytes) -> str:
    """The content name of an archive (model.fn_load checks it against the bytes): sha256: and its hash."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def op(hook: str, fn, extra: Optional[Dict[str, Any]] = None, allow_nonfinite: bool = False, **where) -> dict:
    """An fn op: fn (a callable, a scripted function or module, its archive's bytes, or the
    name model.fn_load gave it) at hook with extra tensors; rows / positions / heads / steps as other ops.
    A result holding NaN or an infinity is refused unless allow_nonfinite."""
    spec = {"op": "fn", "hook": hook, "fn": fn if isinstance(fn, str) else archive(fn)}
    if extra:
        spec["extra"] = dict(extra)
    if allow_nonfinite:
        spec["allow_nonfinite"] = True
    for key in ("rows", "positions", "heads", "steps"):
        if where.get(key) is not None:
            spec[key] = [int(i) for i in where.pop(key)]
    if where:
        raise TypeError("fn op: unknown keyword %r (rows, positions, heads, steps, allow_nonfinite)" % sorted(where)[0])
    return spec


def hook_ops(hooks: Optional[Dict[str, Any]]) -> list:
    """fn ops of a hooks={hook: fn, or (fn, {"extra", "rows", "positions", "heads", "steps", "allow_nonfinite"})} argument."""
    ops = []
    for hook, given in (hooks or {}).items():
        fn, options = given if isinstance(given, tuple) else (given, {})
        ops.append(op(hook, fn, **options))
    return ops
