"""Tensors on gpubox's wires: a dtype name, a shape and the raw C-order little-endian bytes, as torch tensors or numpy arrays.

The one tensor codec of gpubox. Two forms use it:
- a served value (rpc/PROTOCOL.md, "Served functions"): a tensor in a msgpack
  value is the map {TENSOR_KEY: {"kind", "dtype", "shape", "attachments"}},
  its bytes the concatenation of those attachment frames (to_wire, from_wire;
  the serve worker and python/gpubox/served.py);
- a tensor of the model host (hooks/README.md): {"dtype", "shape",
  "attachment"} and one frame (tensor_bytes for interventions.py,
  tensor_from_bytes for models.py).
Standard library only (torch and numpy are imported when a value needs them):
the serve worker is shipped with this file, where gpubox is not installed.
"""

import ctypes
import importlib
import math
import sys

TENSOR_KEY = "__gpubox_tensor__"
FRAME_BYTES = 64 << 20   # one attachment at most: one ZeroMQ frame of the agent's limit
MAX_ATTACHMENTS = 64     # attachments of one message at most
PLAIN = (bool, int, float, str, bytes, bytearray, memoryview)


class TensorWireError(ValueError):
    """A tensor header that does not describe its bytes (dtype, shape, attachments), or a tensor that cannot be built here."""


def optional_module(name):
    """torch or numpy when it imports, else None."""
    module = sys.modules.get(name)
    if module is not None:
        return module
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def tensor_bytes(value):
    """(kind, dtype name, shape, a byte view of the C-order little-endian data) of a
    torch tensor or numpy array: the tensor's own memory where it is already so
    (CPU, contiguous, little-endian); the view keeps that memory alive."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        tensor = value.detach()
        if tensor.device.type != "cpu":
            tensor = tensor.cpu()
        tensor = tensor.contiguous()
        nbytes = tensor.numel() * tensor.element_size()
        view = memoryview(b"")
        if nbytes:
            memory = (ctypes.c_char * nbytes).from_address(tensor.data_ptr())
            memory.owner = tensor  # the views (and frames sent from them) keep the tensor alive
            view = memoryview(memory).cast("B")
        return "torch", str(tensor.dtype).replace("torch.", ""), list(tensor.shape), view
    np = sys.modules["numpy"]
    array = np.ascontiguousarray(value)
    if array.dtype.hasobject:
        raise TypeError("a numpy array of Python objects cannot be sent")
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    view = memoryview(array.reshape(-1)).cast("B") if array.size else memoryview(b"")
    return "numpy", array.dtype.name, list(array.shape), view


def _shape(shape):
    if not isinstance(shape, (list, tuple)) or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0
                                                       for n in shape):
        raise TensorWireError("a tensor's shape must be a list of non-negative integers, not %r" % (shape,))
    return tuple(shape)


def tensor_from_bytes(dtype, shape, buffer, torch=None):
    """A tensor of dtype (a name: "float32", "bfloat16", "int64", ...) and shape on
    buffer, sharing its memory: a torch tensor when torch (the module) is given,
    else a numpy array; numpy has no bfloat16, so that one becomes float32 (a
    copy, exact). TensorWireError when dtype, shape and size disagree."""
    shape = _shape(shape)
    buffer = memoryview(buffer).cast("B")
    count = math.prod(shape)
    if torch is not None:
        torch_dtype = getattr(torch, dtype, None) if isinstance(dtype, str) else None
        if not isinstance(torch_dtype, torch.dtype):
            raise TensorWireError("unknown tensor dtype %r" % (dtype,))
        _check_size(dtype, shape, count * torch.empty((), dtype=torch_dtype).element_size(), len(buffer))
        if count == 0:
            return torch.empty(shape, dtype=torch_dtype)
        if not buffer.readonly:
            return torch.frombuffer(buffer, dtype=torch_dtype).reshape(shape)
        import warnings
        with warnings.catch_warnings():  # read-only memory: the tensor is not written to by us
            warnings.simplefilter("ignore")
            return torch.frombuffer(buffer, dtype=torch_dtype).reshape(shape)
    np = optional_module("numpy")
    if np is None:
        raise TensorWireError("a tensor arrived but neither torch nor numpy imports here")
    if dtype == "bfloat16":
        _check_size(dtype, shape, count * 2, len(buffer))
        halves = np.frombuffer(buffer, dtype="<u2")
        return (halves.astype("<u4") << 16).view("<f4").reshape(shape)
    try:
        np_dtype = np.dtype(dtype).newbyteorder("<") if isinstance(dtype, str) else None
    except TypeError:
        np_dtype = None
    if np_dtype is None or np_dtype.hasobject:
        raise TensorWireError("unknown tensor dtype %r" % (dtype,))
    _check_size(dtype, shape, count * np_dtype.itemsize, len(buffer))
    return np.frombuffer(buffer, dtype=np_dtype).reshape(shape)


def _check_size(dtype, shape, expected, got):
    if expected != got:
        raise TensorWireError("a %s tensor of shape %s has %d bytes, not the %d that came"
                              % (dtype, list(shape), expected, got))


# -- served values ---------------------------------------------------------------

def unsupported(value):
    """The TypeError for a value no wire carries."""
    return TypeError("a value of type %s cannot be sent (use None, bool, int, float, str, bytes, list, tuple, "
                     "dict, a numpy array or a torch tensor)" % type(value).__name__)


def to_wire(value, frames, keep, frame=None):
    """value with each torch tensor / numpy array replaced by its tensor map, its
    bytes appended to frames (views of its memory, each passed through frame()
    when given); keep holds what must outlive the send."""
    if value is None or isinstance(value, PLAIN):
        return value
    if isinstance(value, (list, tuple)):
        return [to_wire(item, frames, keep, frame) for item in value]
    if isinstance(value, dict):
        return {to_wire(k, frames, keep, frame): to_wire(v, frames, keep, frame) for k, v in value.items()}
    torch, np = sys.modules.get("torch"), sys.modules.get("numpy")
    if (torch is not None and isinstance(value, torch.Tensor)) or (np is not None and isinstance(value, np.ndarray)):
        return _tensor_to_wire(value, frames, keep, frame)
    if np is not None and isinstance(value, np.generic):
        return value.item()
    raise unsupported(value)


def _tensor_to_wire(value, frames, keep, frame):
    kind, dtype, shape, view = tensor_bytes(value)
    keep.append(view)
    indexes = []
    for start in range(0, max(len(view), 1), FRAME_BYTES):
        indexes.append(len(frames))
        part = view[start:start + FRAME_BYTES]
        frames.append(frame(part) if frame is not None else part)
    if len(frames) > MAX_ATTACHMENTS:
        raise ValueError("tensors of more than %d GiB cannot be sent in one message" % (MAX_ATTACHMENTS * FRAME_BYTES >> 30))
    return {TENSOR_KEY: {"kind": kind, "dtype": dtype, "shape": shape, "attachments": indexes}}


def tensor_maps(value, found):
    """Appends to found each tensor map's description in value (as from_wire finds them)."""
    if isinstance(value, dict):
        desc = value.get(TENSOR_KEY) if len(value) == 1 else None
        if isinstance(desc, dict):
            found.append(desc)
            return
        for item in value.values():
            tensor_maps(item, found)
    elif isinstance(value, list):
        for item in value:
            tensor_maps(item, found)


def from_wire(value, frames, torch_kinds=None):
    """value with its tensor maps replaced by tensors built on frames: torch
    tensors when torch imports (only for the kinds in torch_kinds when given),
    else numpy arrays.
    A description may carry "_buffer", its bytes already joined (the worker's memfd)."""
    if isinstance(value, dict):
        desc = value.get(TENSOR_KEY) if len(value) == 1 else None
        if isinstance(desc, dict):
            torch = optional_module("torch") if torch_kinds is None or desc.get("kind") in torch_kinds else None
            return tensor_from_bytes(desc.get("dtype"), desc.get("shape") or (), _buffer(desc, frames), torch)
        return {k: from_wire(v, frames, torch_kinds) for k, v in value.items()}
    if isinstance(value, list):
        return [from_wire(item, frames, torch_kinds) for item in value]
    return value


def _buffer(desc, frames):
    """A tensor's bytes: its one frame (shared) or its frames joined."""
    buffer = desc.pop("_buffer", None)
    if buffer is not None:
        return buffer
    indexes = desc.get("attachments") or []
    if not isinstance(indexes, list) or not all(isinstance(i, int) and 0 <= i < len(frames) for i in indexes):
        raise TensorWireError("a tensor names the attachments %r; the message has %d" % (indexes, len(frames)))
    if len(indexes) == 1:
        return memoryview(frames[indexes[0]])
    return bytearray().join(frames[i] for i in indexes)
