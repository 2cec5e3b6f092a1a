"""msgpack in pure Python, for a Python without the msgpack package (a sandbox's
kernel on a bare image): packb and unpackb with the behaviour gpubox asks of
msgpack-python (use_bin_type=True; raw=False, strict_map_key=False). Bytes-like
values pack as bin, str as str; ext types are refused. The one pure-Python
msgpack of gpubox: the serve worker (agent/serve/worker/) is shipped with it."""

import struct

__all__ = ["packb", "unpackb"]

_MAX_DEPTH = 100  # far more than any gpubox message; far below Python's recursion limit


def packb(obj, use_bin_type=True, unicode_errors="strict", max_depth=_MAX_DEPTH):
    """obj as msgpack bytes. unicode_errors as str.encode takes it (the serve
    worker passes "surrogatepass"); max_depth None: only Python's recursion limit."""
    out = bytearray()
    _pack(obj, out, 0, _Options(unicode_errors, max_depth))
    return bytes(out)


class _Options:
    def __init__(self, unicode_errors, max_depth):
        self.unicode_errors = unicode_errors
        self.max_depth = max_depth if max_depth is not None else float("inf")


def _pack_length(out, n, small_tag, small_limit, tags):
    """A length prefix: the fix form when small_tag is given and n fits, else the 8/16/32-bit one."""
    if small_tag is not None and n < small_limit:
        out.append(small_tag | n)
    elif tags[0] is not None and n < 1 << 8:
        out += bytes((tags[0], n))
    elif n < 1 << 16:
        out += struct.pack(">BH", tags[1], n)
    elif n < 1 << 32:
        out += struct.pack(">BI", tags[2], n)
    else:
        raise ValueError("msgpack: an object of %d elements or bytes is too large" % n)


def _pack(obj, out, depth, options):
    if depth > options.max_depth:
        raise ValueError("msgpack: nested deeper than %d" % options.max_depth)
    if obj is None:
        out.append(0xC0)
    elif obj is True or obj is False:
        out.append(0xC3 if obj else 0xC2)
    elif isinstance(obj, int):
        _pack_int(int(obj), out)
    elif isinstance(obj, float):
        out += struct.pack(">Bd", 0xCB, obj)
    elif isinstance(obj, str):
        data = obj.encode("utf-8", options.unicode_errors)
        _pack_length(out, len(data), 0xA0, 32, (0xD9, 0xDA, 0xDB))
        out += data
    elif isinstance(obj, (bytes, bytearray, memoryview)):
        data = bytes(obj)
        _pack_length(out, len(data), None, 0, (0xC4, 0xC5, 0xC6))
        out += data
    elif isinstance(obj, (list, tuple)):
        _pack_length(out, len(obj), 0x90, 16, (None, 0xDC, 0xDD))
        for item in obj:
            _pack(item, out, depth + 1, options)
    elif isinstance(obj, dict):
        _pack_length(out, len(obj), 0x80, 16, (None, 0xDE, 0xDF))
        for key, value in obj.items():
            _pack(key, out, depth + 1, options)
            _pack(value, out, depth + 1, options)
    else:
        raise TypeError("can not serialize %r object" % type(obj).__name__)


def _pack_int(n, out):
    if 0 <= n < 128:
        out.append(n)
    elif -32 <= n < 0:
        out.append(n & 0xFF)
    elif n >= 0:
        for limit, fmt, tag in ((1 << 8, ">BB", 0xCC), (1 << 16, ">BH", 0xCD), (1 << 32, ">BI", 0xCE), (1 << 64, ">BQ", 0xCF)):
            if n < limit:
                out += struct.pack(fmt, tag, n)
                return
        raise OverflowError("msgpack: integer %d does not fit in 64 bits" % n)
    else:
        for limit, fmt, tag in ((1 << 7, ">Bb", 0xD0), (1 << 15, ">Bh", 0xD1), (1 << 31, ">Bi", 0xD2), (1 << 63, ">Bq", 0xD3)):
            if n >= -limit:
                out += struct.pack(fmt, tag, n)
                return
        raise OverflowError("msgpack: integer %d does not fit in 64 bits" % n)


class _Reader:
    def __init__(self, data, options):
        self.data = memoryview(data).cast("B")
        self.at = 0
        self.options = options

    def take(self, n):
        if self.at + n > len(self.data):
            raise ValueError("msgpack: truncated data")
        part = self.data[self.at:self.at + n]
        self.at += n
        return part

    def unpack(self, fmt):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]


# tag -> (struct format of the length or value, what it is)
_SIZED = {
    0xC4: (">B", "bin"), 0xC5: (">H", "bin"), 0xC6: (">I", "bin"),
    0xD9: (">B", "str"), 0xDA: (">H", "str"), 0xDB: (">I", "str"),
    0xDC: (">H", "array"), 0xDD: (">I", "array"), 0xDE: (">H", "map"), 0xDF: (">I", "map"),
}
_SCALARS = {
    0xCA: ">f", 0xCB: ">d", 0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q",
    0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q",
}


def unpackb(data, raw=False, strict_map_key=False, unicode_errors="strict", max_depth=_MAX_DEPTH):
    """The one object in data; ValueError for anything else (cut, extra or malformed bytes)."""
    reader = _Reader(data, _Options(unicode_errors, max_depth))
    value = _unpack(reader, 0)
    if reader.at != len(reader.data):
        raise ValueError("msgpack: extra data after the object")
    return value


def _unpack(reader, depth):
    if depth > reader.options.max_depth:
        raise ValueError("msgpack: nested deeper than %d" % reader.options.max_depth)
    tag = reader.take(1)[0]
    if tag < 0x80:
        return tag
    if tag >= 0xE0:
        return tag - 0x100
    if 0x80 <= tag <= 0x8F:
        return _unpack_map(reader, tag & 0x0F, depth)
    if 0x90 <= tag <= 0x9F:
        return [_unpack(reader, depth + 1) for _ in range(tag & 0x0F)]
    if 0xA0 <= tag <= 0xBF:
        return _text(reader, reader.take(tag & 0x1F))
    if tag == 0xC0:
        return None
    if tag in (0xC2, 0xC3):
        return tag == 0xC3
    if tag in _SCALARS:
        return reader.unpack(_SCALARS[tag])
    if tag in _SIZED:
        fmt, kind = _SIZED[tag]
        n = reader.unpack(fmt)
        if kind == "bin":
            return bytes(reader.take(n))
        if kind == "str":
            return _text(reader, reader.take(n))
        if kind == "array":
            if n > len(reader.data) - reader.at:
                raise ValueError("msgpack: truncated data")
            return [_unpack(reader, depth + 1) for _ in range(n)]
        return _unpack_map(reader, n, depth)
    raise ValueError("msgpack: unsupported type 0x%02x" % tag)


def _text(reader, raw):
    try:
        return bytes(raw).decode("utf-8", reader.options.unicode_errors)
    except UnicodeDecodeError as e:
        raise ValueError("msgpack: a str that is not UTF-8 (%s)" % e) from None


def _unpack_map(reader, n, depth):
    if n > len(reader.data) - reader.at:
        raise ValueError("msgpack: truncated data")
    out = {}
    for _ in range(n):
        key = _unpack(reader, depth + 1)
        if isinstance(key, list):
            key = tuple(key)
        try:
            out[key] = _unpack(reader, depth + 1)
        except TypeError:
            raise ValueError("msgpack: a map key of type %s" % type(key).__name__) from None
    return out
