"""The pure-Python wire of a kernel on a bare image (python/gpubox/_msgpack.py,
_zmtp.py), checked against the independent implementations: msgpack-python
packs the same bytes and reads what we pack; libzmq (a pyzmq ROUTER, heartbeats
on) exchanges short, long and empty frames with our DEALER. Random and cut
inputs only ever raise ValueError. Interpreter: Debian's /usr/bin/python3."""

import os
import random
import tempfile
import time
import unittest

import msgpack
import zmq

import agent_harness  # noqa: F401  (puts gpubox on sys.path when needed)
from gpubox import _msgpack, _zmtp


def random_value(rng, depth=0):
    kinds = ["none", "bool", "int", "float", "str", "bin"] + (["list", "map"] if depth < 4 else [])
    kind = rng.choice(kinds)
    if kind == "none":
        return None
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "int":
        bits = rng.choice([5, 7, 8, 15, 16, 31, 32, 63])
        return rng.randrange(-(1 << bits), 1 << bits) if bits < 64 else rng.randrange(1 << 64)
    if kind == "float":
        return rng.uniform(-1e6, 1e6)
    if kind == "str":
        n = rng.choice([0, 3, 31, 32, 300, 70000])
        return "".join(rng.choice("aé€😀 \n") for _ in range(min(n, 300))) * max(1, n // 300)
    if kind == "bin":
        return os.urandom(rng.choice([0, 1, 255, 256, 70000]))
    if kind == "list":
        return [random_value(rng, depth + 1) for _ in range(rng.choice([0, 1, 15, 16, 40]))]
    return {"k%d" % i: random_value(rng, depth + 1) for i in range(rng.choice([0, 1, 15, 16, 20]))}


class PureMsgpack(unittest.TestCase):
    def test_same_bytes_as_msgpack_python_and_read_back_by_it(self):
        rng = random.Random(7)
        for _ in range(300):
            value = random_value(rng)
            ours = _msgpack.packb(value, use_bin_type=True)
            self.assertEqual(ours, msgpack.packb(value, use_bin_type=True))
            self.assertEqual(msgpack.unpackb(ours, raw=False, strict_map_key=False), value)
            self.assertEqual(_msgpack.unpackb(ours), value)

    def test_reads_every_form_msgpack_python_writes(self):
        # float32 and the wide forms msgpack-python picks only for big values.
        for value, packed in ((1.5, msgpack.packb(1.5, use_single_float=True)), ([1] * 70000, None),
                              ({str(i): i for i in range(70000)}, None), (-(1 << 63), None), ((1 << 64) - 1, None)):
            packed = packed or msgpack.packb(value, use_bin_type=True)
            self.assertEqual(_msgpack.unpackb(packed), value)

    def test_bad_bytes_raise_value_error_only(self):
        rng = random.Random(11)
        good = _msgpack.packb({"a": [1, 2.5, "x" * 40, b"\0" * 300, {"b": None}]})
        for cut in range(len(good)):
            with self.assertRaises(ValueError):
                _msgpack.unpackb(good[:cut])
        for _ in range(3000):
            data = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40)))
            try:
                _msgpack.unpackb(data)
            except ValueError:
                pass
        for bad in (b"\xc1", b"\xd4\x01\x02", b"\xa2\xff\xfe", b"\x91" * 2000 + b"\xc0"):
            with self.assertRaises(ValueError):
                _msgpack.unpackb(bad)
        with self.assertRaises(TypeError):
            _msgpack.packb({"x": object()})


class PureDealer(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="gpubox-zmtp-")
        self.context = zmq.Context()
        self.router = self.context.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        self.router.setsockopt(zmq.HEARTBEAT_IVL, 50)  # PINGs: unanswered for 400 ms, the router drops us
        self.router.setsockopt(zmq.HEARTBEAT_TIMEOUT, 400)
        self.router.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.path = os.path.join(self.dir, "s")
        self.router.bind("ipc://" + self.path)

    def tearDown(self):
        self.router.close(0)
        self.context.term()
        os.unlink(self.path)
        os.rmdir(self.dir)

    def test_messages_both_ways_with_libzmq(self):
        dealer = _zmtp.UnixDealer(self.path, 5)
        frames = [b"header", b"", b"x" * 255, os.urandom(256), os.urandom(3_000_000)]
        dealer.send(frames)
        self.assertTrue(self.router.poll(5000))
        identity, *got = self.router.recv_multipart()
        self.assertEqual(got, frames)
        give_up = time.monotonic() + 1.5
        while time.monotonic() < give_up:  # waiting reads the PINGs and answers them
            self.assertIsNone(dealer.receive(0.05))
        self.router.send_multipart([identity, b"h", b"b", b"", os.urandom(70000)])
        reply = dealer.receive(5)
        self.assertEqual(reply[:2], [b"h", b"b"])
        self.assertEqual([a.bytes for a in reply[2:]][0], b"")
        self.assertEqual(len(reply[3].buffer), 70000)
        self.assertIsNone(dealer.receive(0.1))
        dealer.close()
        self.assertTrue(dealer.closed)

    def test_a_peer_that_is_not_zmtp_is_refused(self):
        import socket
        plain = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        other = os.path.join(self.dir, "plain")
        plain.bind(other)
        plain.listen(1)
        try:
            import threading

            def answer():
                conn, _ = plain.accept()
                conn.recv(64)  # our greeting first, as a server reads it
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n" + b"\0" * 64)
                conn.close()
            threading.Thread(target=answer, daemon=True).start()
            with self.assertRaisesRegex(_zmtp.ProtocolError, "not a ZMTP 3 peer"):
                _zmtp.UnixDealer(other, 5)
        finally:
            plain.close()
            os.unlink(other)


if __name__ == "__main__":
    unittest.main()
