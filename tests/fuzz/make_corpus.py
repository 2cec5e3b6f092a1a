#!/usr/bin/env python3
"""Writes the seed corpus of each fuzz target into corpus/<target>/.

Run from anywhere; rewrites the files it owns (seed-*.bin). The seeds are
valid messages of every kind and the edge cases next to each check: limits,
wrong types, truncation, deep nesting. Input layouts are in fuzz_input.h.
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def pack(value):
    """A small msgpack encoder: None, bool, int, float, str, bytes, list, dict."""
    if value is None:
        return b"\xc0"
    if value is True:
        return b"\xc3"
    if value is False:
        return b"\xc2"
    if isinstance(value, int):
        if 0 <= value < 0x80:
            return bytes([value])
        if -32 <= value < 0:
            return struct.pack("b", value)
        if 0 <= value <= 0xFF:
            return b"\xcc" + struct.pack(">B", value)
        if 0 <= value <= 0xFFFF:
            return b"\xcd" + struct.pack(">H", value)
        if 0 <= value <= 0xFFFFFFFF:
            return b"\xce" + struct.pack(">I", value)
        if 0 <= value:
            return b"\xcf" + struct.pack(">Q", value)
        return b"\xd3" + struct.pack(">q", value)
    if isinstance(value, float):
        return b"\xcb" + struct.pack(">d", value)
    if isinstance(value, str):
        data = value.encode()
        if len(data) < 32:
            return bytes([0xA0 | len(data)]) + data
        if len(data) <= 0xFF:
            return b"\xd9" + bytes([len(data)]) + data
        return b"\xda" + struct.pack(">H", len(data)) + data
    if isinstance(value, (bytes, bytearray)):
        if len(value) <= 0xFF:
            return b"\xc4" + bytes([len(value)]) + bytes(value)
        return b"\xc5" + struct.pack(">H", len(value)) + bytes(value)
    if isinstance(value, (list, tuple)):
        assert len(value) < 16
        return bytes([0x90 | len(value)]) + b"".join(pack(v) for v in value)
    if isinstance(value, dict):
        assert len(value) < 16
        return bytes([0x80 | len(value)]) + b"".join(pack(k) + pack(v) for k, v in value.items())
    raise TypeError(value)


CALL, CANCEL, CREDIT, DATA, RESULT, ERROR = range(6)


def header(id_, kind, method="", timeout_ms=0, credit=0, version=1):
    return pack([version, id_, kind, method, timeout_ms, credit])


def frames(*parts):
    """One message as fuzz_frames reads it: 2-byte little-endian length prefixes."""
    return b"".join(struct.pack("<H", len(p)) + p for p in parts)


def messages(*msgs):
    """Several messages as fuzz_dispatch reads them: a frame count, then the frames."""
    return b"".join(bytes([len(m)]) + frames(*m) for m in msgs)


def nested(depth):
    return b"\x81\xa1k" * depth + b"\x80"


EMPTY = b"\x80"

HEADERS = {
    "call": header(1, CALL, "sys.ping"),
    "call-timeout-credit": header(7, CALL, "proc.spawn", 1500, 4),
    "cancel": header(7, CANCEL),
    "credit": header(7, CREDIT, credit=8),
    "data": header(7, DATA),
    "result": header(7, RESULT),
    "error": header(7, ERROR),
    "max-id": header(2**64 - 1, CALL, "x", 2**64 - 1, 2**64 - 1),
    "id-zero": header(0, CALL, "sys.ping"),
    "version-2": header(1, CALL, "sys.ping", version=2),
    "kind-6": header(1, 6),
    "method-on-cancel": header(1, CANCEL, "sys.ping"),
    "empty-method": header(1, CALL, ""),
    "five-elements": pack([1, 1, 0, "sys.ping", 0]),
    "seven-elements": pack([1, 1, 0, "sys.ping", 0, 0, 0]),
    "negative-id": pack([1, -1, 0, "sys.ping", 0, 0]),
    "signed-positive-id": b"\x96\x01\xd0\x05\x00\xa8sys.ping\x00\x00",
    "id-as-string": pack([1, "1", 0, "sys.ping", 0, 0]),
    "method-str16": pack([1, 1, 0, "m" * 300, 0, 0]),
    "map": pack({"id": 1}),
    "truncated": header(1, CALL, "sys.ping")[:-3],
    "trailing-byte": header(1, CALL, "sys.ping") + b"\x00",
    "empty": b"",
}

BODIES = {
    "empty-map": EMPTY,
    "ping-echo": pack({"a": 1, "b": [1, 2, 3], "c": {"d": None}}),
    "exec": pack({"argv": ["/bin/echo", "hi"], "env": {"A": "1"}, "cwd": "/tmp", "stdin": b"in",
                  "timeout_s": 1.5, "max_output_bytes": 10}),
    "shell": pack({"shell": "echo $A", "timeout_s": 0}),
    "types": pack({"t": True, "f": False, "n": None, "i": -5, "u": 2**64 - 1, "s": "x", "b": b"\x00\xff",
                   "d": 0.25, "neg": -2**63}),
    "nested-64": nested(63),
    "nested-65": nested(65),
    "not-a-map": pack([1, 2, 3]),
    "scalar": pack(5),
    "truncated": pack({"argv": ["/bin/echo", "hi"]})[:-2],
    "trailing": EMPTY + b"\x80",
    "huge-array-length": b"\x81\xa1a\xdd\xff\xff\xff\xff",
    "huge-str-length": b"\x81\xa1a\xdb\xff\xff\xff\xff",
    "int-key": b"\x81\x01\x02",
    "ext": b"\x81\xa1e\xd4\x01\x02",
    "float32": b"\x81\xa1f\xca\x3f\x80\x00\x00",
    "nan": b"\x81\xa9timeout_s\xcb\x7f\xf8\x00\x00\x00\x00\x00\x00",
    "inf": b"\x81\xa9timeout_s\xcb\x7f\xf0\x00\x00\x00\x00\x00\x00",
    "empty": b"",
}

PARAMS = {
    "exec": pack({"argv": ["/bin/echo", "hi"], "env": {"A": "1"}, "cwd": "/tmp", "stdin": b"in",
                  "timeout_s": 1.5, "max_output_bytes": 10}),
    "nul-argv": pack({"argv": ["a\x00b"]}),
    "relative-cwd": pack({"cwd": "tmp"}),
    "nul-cwd": pack({"cwd": "/t\x00"}),
    "env-not-string": pack({"env": {"A": 1}}),
    "signal": pack({"pid": 2, "signal": -64, "group": True, "offset": -2**63}),
    "pid-too-big": pack({"pid": 2**64 - 1}),
    "unknown": pack({"nope": 1}),
    "nan-timeout": BODIES["nan"],
    "inf-timeout": BODIES["inf"],
    "negative-timeout": pack({"timeout_s": -1.0}),
    "null-fields": pack({"argv": None, "shell": None}),
    "stdin-string": pack({"stdin": "text"}),
    "details": pack({"details": {"x": [1, 2]}}),
}

WRITTEN = []


def write(target, name, data):
    folder = os.path.join(HERE, "corpus", target)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "seed-" + name + ".bin")
    with open(path, "wb") as out:
        out.write(data)
    WRITTEN.append(path)


def main():
    for name, data in HEADERS.items():
        write("fuzz_header", name, data)
    for name, data in BODIES.items():
        write("fuzz_body", name, data)

    ping = HEADERS["call"]
    frame_seeds = {
        "ping": frames(ping, EMPTY),
        "ping-4-attachments": frames(ping, EMPTY, b"a", b"", b"c" * 100, b"d"),
        "ping-5-attachments": frames(ping, EMPTY, b"a", b"b", b"c", b"d", b"e"),
        "header-only": frames(ping),
        "data-with-attachment": frames(HEADERS["data"], pack({"eof": True}), b"chunk"),
        "cancel": frames(HEADERS["cancel"], EMPTY),
        "credit": frames(HEADERS["credit"], EMPTY),
        "result-from-client": frames(HEADERS["result"], EMPTY),
        "error-from-client": frames(HEADERS["error"], pack({"code": "internal", "message": "x"})),
        "bad-header": frames(b"\xff\x00", EMPTY),
        "wrong-version": frames(HEADERS["version-2"], EMPTY),
        "unknown-kind": frames(HEADERS["kind-6"], EMPTY),
        "long-method": frames(header(1, CALL, "m" * 40), EMPTY),
        "body-not-map": frames(ping, pack([1])),
        "body-over-limit": frames(ping, pack({"s": "x" * 5000})),
        "deep-body": frames(ping, nested(65)),
        "empty-body": frames(ping, b""),
    }
    for name, data in frame_seeds.items():
        write("fuzz_frames", name, data)

    for name, data in PARAMS.items():
        for select in (0xFFFF, 0x00FF):
            write("fuzz_params", "%s-%04x" % (name, select), struct.pack("<H", select) + data)

    dispatch_seeds = {
        "ping": messages([ping, pack({"x": 1})]),
        "echo-attachments": messages([header(2, CALL, "t.echo"), pack({"a": 1}), b"att"]),
        "stream-window-1": messages([header(3, CALL, "t.stream", 0, 1), pack({"count": 5})],
                                    [header(3, CREDIT, credit=2), EMPTY]),
        "stream-cancel": messages([header(3, CALL, "t.stream", 0, 1), pack({"count": 8})],
                                  [header(3, CANCEL), EMPTY]),
        "upload": messages([header(4, CALL, "t.upload"), EMPTY],
                           [header(4, DATA), pack({"x": 1}), b"chunk"],
                           [header(4, DATA), pack({"eof": True})]),
        "upload-beyond-credit": messages([header(4, CALL, "t.upload"), EMPTY],
                                         *[[header(4, DATA), EMPTY] for _ in range(5)]),
        "deadline": messages([header(5, CALL, "t.wait", 1), EMPTY]),
        "huge-deadline": messages([header(5, CALL, "t.wait", 2**64 - 1), EMPTY]),
        "duplicate-id": messages([header(6, CALL, "t.wait"), EMPTY], [header(6, CALL, "t.wait"), EMPTY]),
        "in-flight-limit": messages(*[[header(10 + i, CALL, "t.wait"), EMPTY] for i in range(8)]),
        "fail-throw-unknown": messages([header(7, CALL, "t.fail"), EMPTY], [header(8, CALL, "t.throw"), EMPTY],
                                       [header(9, CALL, "nope"), EMPTY]),
        "malformed": messages([b"\xff"], [ping], [HEADERS["version-2"], EMPTY], [HEADERS["kind-6"], EMPTY],
                              [HEADERS["result"], EMPTY], [ping, b""], [ping, pack([1])]),
        "too-many-attachments": messages([ping, EMPTY, b"1", b"2", b"3", b"4", b"5"]),
        "body-over-limit": messages([ping, pack({"s": "x" * 2000})]),
        "cancel-unknown": messages([header(99, CANCEL), EMPTY], [header(99, CREDIT, credit=1), EMPTY],
                                   [header(99, DATA), EMPTY]),
    }
    for name, data in dispatch_seeds.items():
        write("fuzz_dispatch", name, data)
    print("wrote %d seed files under %s" % (len(WRITTEN), os.path.join(HERE, "corpus")))


if __name__ == "__main__":
    main()
