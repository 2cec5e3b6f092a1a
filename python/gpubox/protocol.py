"""Wire format of the gpubox RPC protocol, version 1 (rpc/PROTOCOL.md).

Every message is one ZeroMQ multipart message: a header frame (a msgpack
array of 6 elements), a body frame (a msgpack map) and zero or more raw
attachment frames. These are pure functions over bytes.
"""

import enum
from typing import Any, Mapping, NamedTuple

try:
    import msgpack
except ImportError:  # a bare Python (a sandbox's kernel on a bare image)
    from . import _msgpack as msgpack

VERSION = 1
DEFAULT_WINDOW = 16  # a CALL's credit of 0 means this many DATA messages


class Kind(enum.IntEnum):
    CALL = 0      # client: start request `id` (method, params in the body)
    CANCEL = 1    # client: stop request `id`; it ends with error `cancelled`
    CREDIT = 2    # both: the sender is ready for `credit` more DATA messages
    DATA = 3      # both: one stream item
    RESULT = 4    # agent: success; the body is the result; the request has ended
    ERROR = 5     # agent: failure; body {"code", "message", "details"?}; ended


# The error codes an ERROR body's "code" may hold.
ERROR_CODES = (
    "invalid_request", "not_found", "unknown_method", "permission_denied",
    "deadline_exceeded", "busy", "input_changed", "result_rejected",
    "resource_exhausted", "already_exists", "unavailable", "cancelled",
    "raised", "internal",
)


class Header(NamedTuple):
    id: int
    kind: Kind
    method: str = ""     # CALL only
    timeout_ms: int = 0  # CALL only; 0 = the agent's default
    credit: int = 0      # CALL: initial window (0 = 16); CREDIT: increment


def encode_header(header: Header) -> bytes:
    return msgpack.packb([VERSION, header.id, int(header.kind), header.method,
                          header.timeout_ms, header.credit], use_bin_type=True)


def decode_header(frame: bytes) -> Header:
    """Decodes and checks a header; ValueError names what is wrong."""
    try:
        fields = msgpack.unpackb(frame, raw=False)
    except Exception as e:  # msgpack raises several unrelated types
        raise ValueError("header: not valid msgpack (%s)" % e) from None
    if not isinstance(fields, list) or len(fields) != 6:
        raise ValueError("header: expected an array of 6 elements")
    version, id_, kind, method, timeout_ms, credit = fields
    if type(version) is not int or version != VERSION:
        raise ValueError("header[0] version: expected %d, got %r" % (VERSION, version))
    if type(id_) is not int or id_ < 1:
        raise ValueError("header[1] id: expected an unsigned integer from 1")
    if type(kind) is not int or kind not in Kind._value2member_map_:
        raise ValueError("header[2] kind: expected 0 to 5, got %r" % (kind,))
    if not isinstance(method, str):
        raise ValueError("header[3] method: expected a string")
    for index, name, value in ((4, "timeout_ms", timeout_ms), (5, "credit", credit)):
        if type(value) is not int or value < 0:
            raise ValueError("header[%d] %s: expected an unsigned integer" % (index, name))
    return Header(id_, Kind(kind), method, timeout_ms, credit)


def encode_body(body: Mapping[str, Any]) -> bytes:
    """A map; bytes values become msgpack bin, str values msgpack str."""
    return msgpack.packb(dict(body), use_bin_type=True)


def decode_body(frame: bytes) -> dict:
    try:
        body = msgpack.unpackb(frame, raw=False, strict_map_key=False)
    except Exception as e:
        raise ValueError("body: not valid msgpack (%s)" % e) from None
    if not isinstance(body, dict):
        raise ValueError("body: expected a map")
    return body
