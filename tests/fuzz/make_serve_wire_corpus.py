"""Writes the seed corpus of fuzz_serve_wire (run with /usr/bin/python3: needs python3-msgpack):
messages of the agent <-> serve worker channel as agent/serve/worker_wire.h frames them."""
import os, struct, msgpack
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "fuzz_serve_wire")
IN_MEMFD = 1 << 63
def message(body, attachments=(), lengths=None):
    packed = msgpack.packb(body, use_bin_type=True)
    lengths = [len(a) for a in attachments] if lengths is None else lengths
    return (struct.pack("<II", len(packed), len(lengths)) + b"".join(struct.pack("<Q", n) for n in lengths)
            + packed + b"".join(attachments))
result = message({"op": "result", "id": 1, "value": {"s": "text", "l": [1, -2, 3.5, None, True]}})
seeds = {
    "result": result,
    "result-tensor": message({"op": "result", "id": 2, "value": {"__tensor__": 0, "dtype": "float32", "shape": [2]}},
                             [b"\x00\x00\x80\x3f\x00\x00\x00\x40", b""]),
    "raised": message({"op": "raised", "id": 3, "type": "ValueError", "message": "bad", "traceback": "Traceback ..."}),
    "item-then-result": message({"op": "item", "id": 4, "item": 1}) + message({"op": "result", "id": 4, "items": 1}),
    "released": message({"op": "released", "files": [[1, 2], [3, 4]]}),
    "in-memfd": message({"op": "result", "id": 5, "value": None}, lengths=[(256 << 10) | IN_MEMFD]),
    "cut-short": result[:-3],
    "empty-in-memfd-no-fd": message({"op": "result", "ue": 13, "value": None}, lengths=[IN_MEMFD]),
    "nan": message({"op": "result", "id": 6, "value": float("nan")}),
    "body-not-msgpack": struct.pack("<II", 3, 0) + b"\xc1\xc1\xc1",
}
os.makedirs(out, exist_ok=True)
for name, data in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)
