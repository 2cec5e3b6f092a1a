# The serve worker: imports a user's interface.py and runs its @expose
# functions for the agent (agent/serve/service.cpp), each call in a thread of
# its own (the thread that read it: Worker). Shipped inside the agent binary and run with kernel.python; needs
# only the standard library (msgpack is coded here; numpy and torch are used
# when interface code passes arrays or tensors).
#
# Channel: fd 3, a socketpair to the agent. Every message, both ways: u32 LE
# body length, u32 LE attachment count, count x u64 LE lengths, the msgpack
# body, the small attachments' raw bytes. Attachments of 256 KiB or more are
# in one memfd per message instead (passed with SCM_RIGHTS with the prefix;
# their length has bit 63 set; each starts on a page boundary): a received
# tensor is built on the mapped memfd (no copy), a result tensor is written
# into one (one copy) that the agent maps as its outgoing frames. Memfds are
# reused while warm: each side tells the other which of its memfds it no
# longer maps ({"op": "released", "files": [[st_dev, st_ino], ...]}, sent
# before the next message), and only those are written again.

import array
import builtins
import collections
import ctypes
import fcntl
import mmap
import importlib.util
import inspect
import os
import socket
import struct
import sys
import threading
import time
import traceback
import types
import typing
import weakref

FRAME_BYTES = 64 << 20   # one attachment at most: one ZeroMQ frame of the agent's limit
MEMFD_THRESHOLD = int(os.environ.get("GPUBOX_SERVE_MEMFD_THRESHOLD") or 256 << 10)  # attachments this big travel in the memfd
IN_MEMFD = 1 << 63
PAGE = 4096
MAX_ATTACHMENTS = 64
TENSOR_KEY = "__gpubox_tensor__"
WORKER_FILE = "<gpubox-serve-worker>"


# -- msgpack -------------------------------------------------------------------

def pack(value, out):
    if value is None:
        out.append(0xC0)
    elif value is True:
        out.append(0xC3)
    elif value is False:
        out.append(0xC2)
    elif isinstance(value, int):
        if 0 <= value < 128:
            out.append(value)
        elif -32 <= value < 0:
            out.append(value & 0xFF)
        elif 0 <= value < 1 << 64:
            for limit, code, fmt in ((1 << 8, 0xCC, ">B"), (1 << 16, 0xCD, ">H"), (1 << 32, 0xCE, ">I"), (1 << 64, 0xCF, ">Q")):
                if value < limit:
                    out.append(code)
                    out += struct.pack(fmt, value)
                    break
        elif -(1 << 63) <= value < 0:
            for limit, code, fmt in ((1 << 7, 0xD0, ">b"), (1 << 15, 0xD1, ">h"), (1 << 31, 0xD2, ">i"), (1 << 63, 0xD3, ">q")):
                if value >= -limit:
                    out.append(code)
                    out += struct.pack(fmt, value)
                    break
        else:
            raise TypeError("the integer %d does not fit in 64 bits" % value)
    elif isinstance(value, float):
        out.append(0xCB)
        out += struct.pack(">d", value)
    elif isinstance(value, str):
        data = value.encode("utf-8", "surrogatepass")
        n = len(data)
        if n < 32:
            out.append(0xA0 | n)
        elif n < 1 << 8:
            out += bytes((0xD9, n))
        elif n < 1 << 16:
            out.append(0xDA)
            out += struct.pack(">H", n)
        else:
            out.append(0xDB)
            out += struct.pack(">I", n)
        out += data
    elif isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
        n = len(data)
        if n < 1 << 8:
            out += bytes((0xC4, n))
        elif n < 1 << 16:
            out.append(0xC5)
            out += struct.pack(">H", n)
        else:
            out.append(0xC6)
            out += struct.pack(">I", n)
        out += data
    elif isinstance(value, (list, tuple)):
        n = len(value)
        if n < 16:
            out.append(0x90 | n)
        elif n < 1 << 16:
            out.append(0xDC)
            out += struct.pack(">H", n)
        else:
            out.append(0xDD)
            out += struct.pack(">I", n)
        for item in value:
            pack(item, out)
    elif isinstance(value, dict):
        n = len(value)
        if n < 16:
            out.append(0x80 | n)
        elif n < 1 << 16:
            out.append(0xDE)
            out += struct.pack(">H", n)
        else:
            out.append(0xDF)
            out += struct.pack(">I", n)
        for key, item in value.items():
            pack(key, out)
            pack(item, out)
    else:
        raise TypeError("a value of type %s cannot be sent (use None, bool, int, float, str, bytes, list, "
                        "tuple, dict, a numpy array or a torch tensor)" % type(value).__name__)


def unpack(data):
    value, end = _unpack(memoryview(data), 0)
    if end != len(data):
        raise ValueError("msgpack: %d bytes left over" % (len(data) - end))
    return value


def _unpack(data, at):
    code = data[at]
    at += 1
    if code < 0x80:
        return code, at
    if code >= 0xE0:
        return code - 0x100, at
    if 0x80 <= code <= 0x8F:
        return _map(data, at, code & 0x0F)
    if 0x90 <= code <= 0x9F:
        return _array(data, at, code & 0x0F)
    if 0xA0 <= code <= 0xBF:
        n = code & 0x1F
        return str(data[at:at + n], "utf-8", "surrogatepass"), at + n
    if code == 0xC0:
        return None, at
    if code == 0xC2:
        return False, at
    if code == 0xC3:
        return True, at
    sized = {0xC4: (">B", "bin"), 0xC5: (">H", "bin"), 0xC6: (">I", "bin"),
             0xD9: (">B", "str"), 0xDA: (">H", "str"), 0xDB: (">I", "str"),
             0xDC: (">H", "array"), 0xDD: (">I", "array"), 0xDE: (">H", "map"), 0xDF: (">I", "map")}
    if code in sized:
        fmt, kind = sized[code]
        width = struct.calcsize(fmt)
        (n,) = struct.unpack_from(fmt, data, at)
        at += width
        if kind == "bin":
            return bytes(data[at:at + n]), at + n
        if kind == "str":
            return str(data[at:at + n], "utf-8", "surrogatepass"), at + n
        if kind == "array":
            return _array(data, at, n)
        return _map(data, at, n)
    scalars = {0xCA: ">f", 0xCB: ">d", 0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q",
               0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q"}
    if code in scalars:
        fmt = scalars[code]
        (value,) = struct.unpack_from(fmt, data, at)
        return value, at + struct.calcsize(fmt)
    raise ValueError("msgpack: unsupported type byte 0x%02x" % code)


def _array(data, at, n):
    items = []
    for _ in range(n):
        item, at = _unpack(data, at)
        items.append(item)
    return items, at


def _map(data, at, n):
    out = {}
    for _ in range(n):
        key, at = _unpack(data, at)
        value, at = _unpack(data, at)
        out[key] = value
    return out, at


# -- tensors -------------------------------------------------------------------

def _torch():
    return sys.modules.get("torch") or _try_import("torch")


def _numpy():
    return sys.modules.get("numpy") or _try_import("numpy")


def _try_import(name):
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def tensor_from_buffer(desc, buffer):
    kind, dtype, shape = desc.get("kind"), desc.get("dtype"), tuple(desc.get("shape") or ())
    torch = _torch() if kind == "torch" else None
    if torch is not None:
        torch_dtype = getattr(torch, str(dtype), None)
        if not isinstance(torch_dtype, torch.dtype):
            raise TypeError("tensor dtype %r: not a torch dtype" % (dtype,))
        if len(buffer) == 0:
            return torch.empty(shape, dtype=torch_dtype)
        return torch.frombuffer(buffer, dtype=torch_dtype).reshape(shape)
    np = _numpy()
    if np is None:
        raise TypeError("a %s tensor arrived but neither torch nor numpy imports in the worker" % kind)
    if dtype == "bfloat16":
        halves = np.frombuffer(buffer, dtype="<u2")
        return (halves.astype("<u4") << 16).view("<f4").reshape(shape)
    return np.frombuffer(buffer, dtype=np.dtype(str(dtype)).newbyteorder("<")).reshape(shape)


def tensor_to_wire(value, frames, keep):
    """A tensor map for value (torch tensor or numpy array), its bytes appended
    to frames as views of its memory; keep holds what must outlive the send."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        tensor = value.detach()
        if tensor.device.type != "cpu":
            tensor = tensor.cpu()
        tensor = tensor.contiguous()
        nbytes = tensor.numel() * tensor.element_size()
        keep.append(tensor)
        view = memoryview((ctypes.c_char * nbytes).from_address(tensor.data_ptr())).cast("B") if nbytes else memoryview(b"")
        kind, dtype, shape = "torch", str(tensor.dtype).replace("torch.", ""), list(tensor.shape)
    else:
        np = sys.modules["numpy"]
        array = np.ascontiguousarray(value)
        if array.dtype.hasobject:
            raise TypeError("a numpy array of Python objects cannot be sent")
        if array.dtype.byteorder == ">":
            array = array.astype(array.dtype.newbyteorder("<"))
        keep.append(array)
        view = memoryview(array.reshape(-1)).cast("B") if array.size else memoryview(b"")
        kind, dtype, shape = "numpy", array.dtype.name, list(array.shape)
    indexes = []
    for start in range(0, max(len(view), 1), FRAME_BYTES):
        indexes.append(len(frames))
        frames.append(view[start:start + FRAME_BYTES])
    if len(frames) > MAX_ATTACHMENTS:
        raise ValueError("tensors of more than %d GiB cannot be sent in one message" % (MAX_ATTACHMENTS * FRAME_BYTES >> 30))
    return {TENSOR_KEY: {"kind": kind, "dtype": dtype, "shape": shape, "attachments": indexes}}


def to_wire(value, frames, keep):
    """value with its tensors replaced by tensor maps (their bytes in frames)."""
    if value is None or isinstance(value, (bool, int, float, str, bytes, bytearray)):
        return value
    if isinstance(value, (list, tuple)):
        return [to_wire(item, frames, keep) for item in value]
    if isinstance(value, dict):
        return {to_wire(k, frames, keep): to_wire(v, frames, keep) for k, v in value.items()}
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        return tensor_to_wire(value, frames, keep)
    np = sys.modules.get("numpy")
    if np is not None:
        if isinstance(value, np.ndarray):
            return tensor_to_wire(value, frames, keep)
        if isinstance(value, np.generic):
            return value.item()
    return value  # pack() names what cannot be sent


def tensor_maps(value, found):
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


def from_wire(value, frames):
    """value with its tensor maps replaced by tensors built on frames."""
    if isinstance(value, dict):
        desc = value.get(TENSOR_KEY) if len(value) == 1 else None
        if isinstance(desc, dict):
            buffer = desc.pop("_buffer", None)
            if buffer is None:
                buffer = bytearray().join(frames[i] for i in desc.get("attachments") or ())
            return tensor_from_buffer(desc, buffer)
        return {k: from_wire(v, frames) for k, v in value.items()}
    if isinstance(value, list):
        return [from_wire(item, frames) for item in value]
    return value


# -- the channel -----------------------------------------------------------------

def file_id(fd):
    info = os.fstat(fd)
    return [info.st_dev, info.st_ino]


class ResultMemfds:
    """Warm memfds for the large attachments the worker sends, mapped here;
    each is lent to one message and back once the agent has released it.
    Sealed against shrinking (the agent maps them). Any thread."""

    MAX_SLOTS = 4
    MAX_BYTES = 512 << 20

    def __init__(self):
        self.lock = threading.Lock()
        self.slots = []  # [fd, mmap, size, file id, lent]; guarded by lock

    def lend(self, size):
        """A slot of at least size bytes, or None (the caller makes a one-off)."""
        size = (size + PAGE - 1) // PAGE * PAGE
        with self.lock:
            idle = [slot for slot in self.slots if not slot[4]]
            fitting = [slot for slot in idle if slot[2] >= size]
            total = sum(slot[2] for slot in self.slots)
            if fitting:
                slot = min(fitting, key=lambda slot: slot[2])
            elif idle and total - max(idle, key=lambda slot: slot[2])[2] + size <= self.MAX_BYTES:
                slot = max(idle, key=lambda slot: slot[2])
                os.ftruncate(slot[0], size)
                slot[1].close()
                slot[1], slot[2] = mmap.mmap(slot[0], size), size
            elif len(self.slots) < self.MAX_SLOTS and total + size <= self.MAX_BYTES:
                fd = os.memfd_create("gpubox-serve-out", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
                os.ftruncate(fd, size)
                fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL)
                slot = [fd, mmap.mmap(fd, size), size, file_id(fd), False]
                self.slots.append(slot)
            else:
                return None
            slot[4] = True
            return slot

    def give_back(self, files):
        with self.lock:
            for slot in self.slots:
                if slot[3] in files:
                    slot[4] = False


class Channel:
    """fd 3. One reader (the main thread); writers take the lock."""

    def __init__(self):
        self.sock = socket.socket(fileno=3)
        self.lock = threading.Lock()
        self.released = collections.deque()  # the agent's memfds no longer mapped here (any thread appends)
        self.memfds = ResultMemfds()

    def _fill(self, view):
        while len(view):
            n = self.sock.recv_into(view)
            if n == 0:
                return False
            view = view[n:]
        return True

    def _exact(self, n):
        buffer = bytearray(n)
        if n and not self._fill(memoryview(buffer)):
            return None
        return buffer

    def _prefix(self):
        """The 8-byte prefix and the memfd passed with it (or None)."""
        head, fds = bytearray(), []
        while len(head) < 8:
            data, ancillary, _, _ = self.sock.recvmsg(8 - len(head), socket.CMSG_SPACE(4 * 4))
            if not data:
                return None, None
            head += data
            for level, kind, payload in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds += array.array("i", payload[:len(payload) - len(payload) % 4])
        for extra in fds[1:]:
            os.close(extra)
        return head, (fds[0] if fds else None)

    def read(self):
        """(body, frames), or None once the agent closed the channel."""
        head, memfd = self._prefix()
        if head is None:
            return None
        try:
            body_len, count = struct.unpack("<II", head)
            lengths = struct.unpack("<%dQ" % count, self._exact(8 * count)) if count else ()
            body = unpack(self._exact(body_len))
            mapped = None
            if memfd is not None:
                extent = 0
                for length in lengths:
                    if length & IN_MEMFD:
                        extent = (extent + (length & ~IN_MEMFD) + PAGE - 1) // PAGE * PAGE
                mapped = memoryview(b"")
                if extent:
                    # Only this message's part. Private: the tensors built on it may be
                    # written to (copy on write); once nothing here maps it, the agent
                    # may reuse the memfd.
                    mapping = mmap.mmap(memfd, extent, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
                    weakref.finalize(mapping, self.released.append, file_id(memfd))
                    mapped = memoryview(mapping)
        finally:
            if memfd is not None:
                os.close(memfd)
        frames, offsets, end = [None] * count, [None] * count, 0
        for i, length in enumerate(lengths):
            if length & IN_MEMFD:
                length &= ~IN_MEMFD
                if mapped is None:
                    raise ValueError("an attachment in a memfd came without one")
                offsets[i] = (end, length)
                frames[i] = mapped[end:end + length]
                end = (end + length + PAGE - 1) // PAGE * PAGE
        # A tensor's chunks are consecutive in the mapping: one view of them all.
        found = []
        tensor_maps(body.get("args"), found)
        tensor_maps(body.get("kwargs"), found)
        for desc in found:
            indexes = desc.get("attachments")
            if (isinstance(indexes, list) and indexes and all(isinstance(i, int) and 0 <= i < count and offsets[i]
                                                               for i in indexes)
                    and all(offsets[a][0] + offsets[a][1] == offsets[b][0] for a, b in zip(indexes, indexes[1:]))):
                start = offsets[indexes[0]][0]
                desc["_buffer"] = mapped[start:start + sum(offsets[i][1] for i in indexes)]
        for i in range(count):
            if frames[i] is None:
                frames[i] = memoryview(bytearray(lengths[i]))
                if not self._fill(frames[i]):
                    return None
        return body, frames

    def send(self, body, frames=()):
        packed = bytearray()
        pack(body, packed)
        self.send_packed(packed, frames)

    def send_packed(self, packed, frames=()):
        lengths, memfd, end = [], None, 0
        extent = sum((len(frame) + PAGE - 1) // PAGE * PAGE for frame in frames if len(frame) >= MEMFD_THRESHOLD)
        slot = self.memfds.lend(extent) if extent else None
        try:
            for frame in frames:
                length = len(frame)
                if length >= MEMFD_THRESHOLD and slot is not None:
                    memfd, next_end = slot[0], (end + length + PAGE - 1) // PAGE * PAGE
                    slot[1][end:end + length] = frame
                    slot[1][end + length:next_end] = bytes(next_end - end - length)  # nothing of an earlier message
                    end = next_end
                    lengths.append(length | IN_MEMFD)
                    continue
                if length >= MEMFD_THRESHOLD:
                    if memfd is None:
                        memfd = os.memfd_create("gpubox-serve", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
                    view, done = memoryview(frame).cast("B"), 0
                    while done < length:
                        done += os.pwrite(memfd, view[done:], end + done)
                    end = (end + length + PAGE - 1) // PAGE * PAGE
                    length |= IN_MEMFD
                lengths.append(length)
            if memfd is not None and slot is None:
                # Sealed: the agent maps it, so it must never shrink under that mapping.
                fcntl.fcntl(memfd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE |
                            fcntl.F_SEAL_SEAL)
            head = struct.pack("<II", len(packed), len(frames)) + b"".join(struct.pack("<Q", n) for n in lengths)
            with self.lock:
                self._send_released()
                message = head + packed
                if memfd is not None:
                    sent = self.sock.sendmsg([message], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                                          array.array("i", [memfd]))])
                    message = message[sent:]
                self.sock.sendall(message)
                for frame in frames:
                    if 0 < len(frame) < MEMFD_THRESHOLD:
                        self.sock.sendall(frame)
        except BaseException:
            if slot is not None:
                self.memfds.give_back([slot[3]])
            raise
        finally:
            if memfd is not None and slot is None:
                os.close(memfd)

    def _send_released(self):
        """Tells the agent which of its memfds nothing here maps any more. REQUIRES: self.lock."""
        files = []
        while self.released:
            files.append(self.released.popleft())
        if files:
            packed = bytearray()
            pack({"op": "released", "files": files}, packed)
            self.sock.sendall(struct.pack("<II", len(packed), 0) + packed)


# -- what interface.py sees ------------------------------------------------------

EXPOSED = {}   # name -> function, in the order exposed
SIGNATURES = {}  # name -> inspect.Signature, computed once at load
MODELS = {}    # get_model_path: name -> path


def expose(function=None, *, name=None):
    """Marks a function to be served: `@expose` or `@expose(name="other")`."""
    def mark(fn):
        if not callable(fn):
            raise TypeError("@expose: %r is not a function" % (fn,))
        served = name or fn.__name__
        if not isinstance(served, str) or not served.isidentifier():
            raise ValueError("@expose: the name %r is not a Python identifier" % (served,))
        EXPOSED[served] = fn
        return fn
    if function is None:
        return mark
    return mark(function)


def get_model_path(name):
    """The path in the sandbox of a model the sandbox config names (kernel.models
    by name or var_name, model_host.models by name); a hidden model's is the
    path it was placed at."""
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError("no model named %r in the sandbox config (kernel.models, model_host.models)" % (name,)) from None


# -- describing functions ----------------------------------------------------------

def annotation_text(annotation):
    if annotation is inspect.Parameter.empty:
        return None
    return inspect.formatannotation(annotation)


def schema_of(hint):
    """A JSON Schema for a type hint; {} with the hint's text for what has none."""
    if hint is inspect.Parameter.empty or hint is typing.Any:
        return {}
    if hint is None or hint is type(None):
        return {"type": "null"}
    simple = {bool: "boolean", int: "integer", float: "number", str: "string"}
    if hint in simple:
        return {"type": simple[hint]}
    if hint in (bytes, bytearray):
        return {"type": "string", "description": "bytes"}
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Annotated:
        return schema_of(args[0])
    union_type = getattr(types, "UnionType", None)
    if origin is typing.Union or (union_type is not None and origin is union_type):
        return {"anyOf": [schema_of(arg) for arg in args]}
    if origin is typing.Literal:
        schema = {"enum": list(args)}
        kinds = {type(arg) for arg in args}
        if len(kinds) == 1 and next(iter(kinds)) in simple:
            schema["type"] = simple[next(iter(kinds))]
        return schema
    import collections.abc as abc
    if hint in (list, set, frozenset, abc.Sequence) or origin in (list, set, frozenset, abc.Sequence, abc.Iterable):
        schema = {"type": "array"}
        if args:
            schema["items"] = schema_of(args[0])
        if origin in (set, frozenset) or hint in (set, frozenset):
            schema["uniqueItems"] = True
        return schema
    if hint is tuple or origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": schema_of(args[0])}
        if args:
            return {"type": "array", "prefixItems": [schema_of(arg) for arg in args],
                    "minItems": len(args), "maxItems": len(args)}
        return {"type": "array"}
    if hint is dict or origin in (dict, abc.Mapping):
        schema = {"type": "object"}
        if len(args) == 2:
            schema["additionalProperties"] = schema_of(args[1])
        return schema
    return {"description": annotation_text(hint)}


def json_default(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(json_default(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and json_default(v) for k, v in value.items())
    return False


def describe(name, fn):
    signature = inspect.signature(fn)
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception:
        hints = {}
    doc = inspect.getdoc(fn) or ""
    parameters, properties, required = [], {}, []
    for param in signature.parameters.values():
        entry = {"name": param.name, "kind": param.kind.name.lower(), "annotation": annotation_text(param.annotation)}
        if param.default is not inspect.Parameter.empty:
            entry["default"] = repr(param.default)
        parameters.append(entry)
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        schema = dict(schema_of(hints.get(param.name, param.annotation)))
        if param.default is inspect.Parameter.empty:
            required.append(param.name)
        elif json_default(param.default):
            schema["default"] = param.default if not isinstance(param.default, tuple) else list(param.default)
        properties[param.name] = schema
    input_schema = {"type": "object", "properties": properties, "required": required,
                    "additionalProperties": any(p.kind == p.VAR_KEYWORD for p in signature.parameters.values())}
    return {"name": name, "signature": str(signature), "doc": doc, "parameters": parameters,
            "returns": annotation_text(signature.return_annotation),
            "is_generator": inspect.isgeneratorfunction(fn), "input_schema": input_schema,
            "description": doc if doc else "%s%s" % (name, signature)}


# -- running calls -----------------------------------------------------------------

class Cancelled(BaseException):
    """Raised in a call's thread when the agent cancels it (deadline, CANCEL)."""


def remote_traceback(error):
    """The traceback without the worker's own frames."""
    frames = [f for f in traceback.extract_tb(error.__traceback__)
              if f.filename != WORKER_FILE and not f.filename.startswith("<frozen importlib")]
    lines = ["Traceback (most recent call last):\n"] + traceback.format_list(frames)
    lines += traceback.format_exception_only(type(error), error)
    return "".join(lines)


def type_name(error):
    kind = type(error)
    return kind.__qualname__ if kind.__module__ == "builtins" else "%s.%s" % (kind.__module__, kind.__qualname__)


class Call:
    def __init__(self, call_id, name, fn, window):
        self.id = call_id
        self.name = name
        self.fn = fn
        self.credit = threading.Semaphore(window)
        self.cancelled = False
        self.thread = None  # ident while running
        self.generator = inspect.isgeneratorfunction(fn)


HANDOFF_S = 0.002  # a call that runs longer than this hands the channel to another thread
IDLE_S = 1.0       # this long without a call, the next thread in line sleeps until one comes


class Worker:
    """Runs calls, each in a thread of its own. One thread at a time reads
    the channel (the reader) and runs the calls it reads itself: a quick
    call costs no hand-off between threads at all. The next thread in line
    checks every HANDOFF_S while calls come, and takes over the reading from
    a reader that has been busy in one call that long, so a long call holds
    up nothing else (a cancel, a credit, another call) for more than a few
    milliseconds. Threads are started as they are needed."""

    def __init__(self, channel):
        self.channel = channel
        self.lock = threading.Lock()
        self.turn = threading.Condition(self.lock)
        self.calls = {}          # id -> Call; guarded by lock
        self.reader = None       # the reading thread's ident; guarded by lock
        self.busy_since = None   # when the reader began running a call; guarded by lock
        self.next_up = None      # the thread that takes over from a busy reader; guarded by lock
        self.last_call = 0.0     # guarded by lock

    def serve(self):
        me = threading.get_ident()
        with self.lock:
            self.wait_for_turn(me)
        while True:
            call, body, frames = self.read_call()
            with self.lock:
                now = time.monotonic()
                if now - self.last_call >= IDLE_S:
                    self.turn.notify_all()  # the next in line checks on this call
                self.busy_since = self.last_call = now
                alone = self.next_up is None
            if alone:
                threading.Thread(target=self.serve, daemon=True).start()
            if call is not None:
                try:
                    self.start_call(call, body, frames)
                except BaseException:
                    pass  # a cancellation that landed after the call ended
            del call, body, frames  # nothing here keeps the arguments' memfd mapped
            with self.lock:
                if self.reader == me:
                    self.busy_since = None  # still the reader: read on
                else:
                    self.wait_for_turn(me)

    def wait_for_turn(self, me):
        """Returns once this thread is the reader. REQUIRES: self.lock."""
        while True:
            if self.reader is None:
                self.reader = me
                return
            if self.next_up is None:
                self.next_up = me
            if self.next_up != me:
                self.turn.wait()
                continue
            if self.busy_since is not None and time.monotonic() - self.busy_since >= HANDOFF_S:
                self.reader, self.busy_since, self.next_up = me, None, None
                self.turn.notify()  # another thread becomes the next in line
                return
            active = time.monotonic() - self.last_call < IDLE_S
            self.turn.wait(HANDOFF_S if active else None)

    def read_call(self):
        """As the reader: handles messages until a call comes, registered
        before anything else is read (a cancel or credit for it finds it).
        (call or None when it was answered already, body, frames)."""
        while True:
            message = self.channel.read()
            if message is None:
                os._exit(0)
            body, frames = message
            if body.get("op") == "call":
                return self.register(body), body, frames
            self.handle(body, frames)  # quick: cancel, credit, released

    def handle(self, body, frames):
        op = body.get("op")
        call_id = body.get("id")
        if op == "cancel":
            with self.lock:
                call = self.calls.get(call_id)
                if call is not None:
                    call.cancelled = True
                    if call.thread is not None:
                        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(call.thread), ctypes.py_object(Cancelled))
        elif op == "released":
            self.channel.memfds.give_back(body.get("files") or [])
        elif op == "credit":
            with self.lock:
                call = self.calls.get(call_id)
            if call is not None:
                for _ in range(int(body.get("n", 1))):
                    call.credit.release()

    def register(self, body):
        """The Call for a call message, in self.calls; None (answered) for an unknown function."""
        call_id, name = body.get("id"), body.get("function")
        fn = EXPOSED.get(name)
        if fn is None:
            self.channel.send({"op": "error", "id": call_id, "code": "not_found",
                               "message": "no function %r; exposed: %s" % (name, ", ".join(EXPOSED))})
            return None
        call = Call(call_id, name, fn, int(body.get("window", 4)))
        with self.lock:
            self.calls[call_id] = call
        return call

    def start_call(self, call, body, frames):
        call_id, name = call.id, call.name
        try:
            args = from_wire(body.get("args") or [], frames)
            kwargs = from_wire(body.get("kwargs") or {}, frames)
            if not isinstance(args, list) or not isinstance(kwargs, dict):
                raise TypeError("args must be a list and kwargs a map")
            SIGNATURES[name].bind(*args, **kwargs)
        except Exception as error:
            with self.lock:
                self.calls.pop(call_id, None)
            self.channel.send({"op": "error", "id": call_id, "code": "invalid_request",
                               "message": "%s%s: %s" % (name, SIGNATURES[name], error)})
            return
        del body, frames
        self.run(call, args, kwargs)

    def run(self, call, args, kwargs):
        with self.lock:
            if call.cancelled:
                self.calls.pop(call.id, None)
                return
            call.thread = threading.get_ident()
        try:
            try:
                if call.generator:
                    count = 0
                    for item in call.fn(*args, **kwargs):
                        while not call.credit.acquire(timeout=0.1):
                            if call.cancelled:
                                raise Cancelled()
                        self.send_value({"op": "item", "id": call.id}, "item", item, call)
                        count += 1
                    self.finish(call, {"op": "result", "id": call.id, "items": count})
                else:
                    value = call.fn(*args, **kwargs)
                    self.send_value({"op": "result", "id": call.id}, "value", value, call, final=True)
            except Cancelled:
                self.finish(call, None)
            except BaseException as error:
                self.finish(call, {"op": "raised", "id": call.id, "type": type_name(error), "message": str(error),
                                   "traceback": remote_traceback(error)})
        except Cancelled:
            self.finish(call, None)

    def send_value(self, head, key, value, call, final=False):
        frames, keep = [], []
        try:
            head[key] = to_wire(value, frames, keep)
            packed = bytearray()
            pack(head, packed)
        except Exception as error:
            raise TypeError("%s of %s cannot be sent: %s" % ("the result" if final else "an item", call.name, error)) from None
        if final:
            self.finish(call, packed, frames)
        else:
            self.channel.send_packed(packed, frames)

    def finish(self, call, body, frames=()):
        with self.lock:
            if call.thread is not None:
                # A cancel scheduled but not delivered yet must not land later, in the next call or a read.
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(call.thread), None)
            call.thread = None
            self.calls.pop(call.id, None)
            cancelled = call.cancelled
        if body is not None and not cancelled:
            if isinstance(body, dict):
                self.channel.send(body, frames)
            else:
                self.channel.send_packed(body, frames)


def load(body):
    MODELS.update(body.get("models") or {})
    path = body["path"]
    for extra in reversed(body.get("sys_path") or []):
        if extra not in sys.path:
            sys.path.insert(0, extra)
    sys.path.insert(0, os.path.dirname(path))
    builtins.expose = expose
    builtins.get_model_path = get_model_path
    module_name = os.path.splitext(os.path.basename(path))[0] or "interface"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError("%s is not a Python file" % path)
    module = importlib.util.module_from_spec(spec)
    module.expose = expose
    module.get_model_path = get_model_path
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    if not EXPOSED:
        raise LookupError("%s exposes no function: mark the ones to serve with @expose" % path)
    SIGNATURES.update((name, inspect.signature(fn)) for name, fn in EXPOSED.items())
    return [describe(name, fn) for name, fn in EXPOSED.items()]


def main():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(line_buffering=True)
        except Exception:
            pass
    channel = Channel()
    first = channel.read()
    if first is None:
        os._exit(0)
    try:
        functions = load(first[0])
    except BaseException as error:
        channel.send({"op": "load_failed", "type": type_name(error), "message": str(error),
                      "traceback": remote_traceback(error)})
        os._exit(1)
    channel.send({"op": "ready", "functions": functions})
    Worker(channel).serve()


main()
