"""Writes the seed corpus of fuzz_relay_frames (run with /usr/bin/python3: needs python3-msgpack)."""
import json, os, struct, msgpack
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "fuzz_relay_frames")
def frames(*fs):
    b = b""
    for f in fs:
        if isinstance(f, str): f = f.encode()
        b += struct.pack("<H", len(f)) + f
    return b
header = json.dumps({"msg_id": "1", "session": "s", "username": "u", "date": "", "msg_type": "execute_request", "version": "5.3"})
parts = [header, "{}", "{}", json.dumps({"code": "1"})]
conn = json.dumps({"ip": "127.0.0.1", "transport": "tcp", "key": "k", "signature_scheme": "hmac-sha256",
                   "shell_port": 1, "iopub_port": 2, "stdin_port": 3, "control_port": 4, "hb_port": 5})
seeds = {
    "message": frames(msgpack.packb({"ch": "shell", "peer": 1}), "sig", *parts),
    "message-buffers": frames(msgpack.packb({"ch": "stdin", "peer": 7}), "sig", *parts, b"\x00\x01", b"buf"),
    "shutdown": frames(msgpack.packb({"ch": "control", "peer": 2}), "", header.replace("execute_request", "shutdown_request"), "{}", "{}", '{"restart": true}'),
    "close": frames(msgpack.packb({"close": 3})),
    "restart": frames(msgpack.packb({"restart": True})),
    "bad-channel": frames(msgpack.packb({"ch": "iopub", "peer": 1}), "sig", *parts),
    "header-not-json": frames(msgpack.packb({"ch": "shell", "peer": 1}), "sig", "{not json", "{}", "{}", "{}"),
    "too-few": frames(msgpack.packb({"ch": "shell", "peer": 1}), "sig", header),
    "frontend": frames("identity", "<IDS|MSG>", "0" * 64, *parts),
    "frontend-no-delimiter": frames("identity", "sig", *parts),
    "connection-file": frames(msgpack.packb({}), conn),
    "connection-file-bad-ip": frames(msgpack.packb({}), conn.replace("127.0.0.1", "0.0.0.0")),
}
for name, data in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)
