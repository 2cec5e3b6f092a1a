"""CURVE authentication over tcp://, and one client not waiting for another."""

import hashlib
import os
import shutil
import tempfile
import time
import unittest

import zmq

from agent_harness import AgentTestCase, keygen_with_agent
import gpubox
from gpubox.protocol import Header, Kind, encode_body, encode_header


class CurveTestCase(AgentTestCase):
    """An agent serving ipc and tcp://127.0.0.1:0 (any free port) with
    CURVE; the allow-list is a file holding the public keys of `self.keys`
    and `self.other_keys`."""

    log_level = "info"  # the bound tcp port is read from the "rpc listening" line

    def rpc_config_for_test(self):
        self.server_public, self.server_secret = keygen_with_agent()
        self.keys = gpubox.keygen()
        self.other_keys = gpubox.keygen()
        self.keys_dir = self.make_dir()
        self.authorized_file = os.path.join(self.keys_dir, "authorized_keys")
        self.write_authorized([self.keys[0], self.other_keys[0]])
        return {"endpoints": ["ipc://{state_dir}/rpc.sock", "tcp://127.0.0.1:0"],
                "secret_key": self.server_secret,
                "authorized_keys_file": self.authorized_file}

    def setUp(self):
        super().setUp()
        self.tcp = self.agent.tcp_endpoint()
        self.marker = os.path.join(self.scratch, "ran")

    def make_dir(self):
        path = tempfile.mkdtemp(prefix="gpubox-py-keys-")
        self.addCleanup(shutil.rmtree, path, True)
        return path

    def write_authorized(self, public_keys):
        previous = os.stat(self.authorized_file).st_mtime_ns if os.path.exists(self.authorized_file) else 0
        with open(self.authorized_file, "w") as f:
            f.write("# gpubox test clients\n")
            for key in public_keys:
                f.write(key + "\n")
        # The agent notices a change by the modification time: make sure it moves
        # even on a file system with coarse timestamps.
        mtime = max(time.time_ns(), previous + 10_000_000)
        os.utime(self.authorized_file, ns=(mtime, mtime))

    def connect_tcp(self, keys=None, server_public_key=None, **kwargs):
        keys = keys or self.keys
        client = gpubox.Client(self.tcp, server_public_key=server_public_key or self.server_public,
                               client_secret_key=keys[1], client_public_key=keys[0], **kwargs)
        self.addCleanup(client.close)
        return client

    def touch_marker_params(self):
        return {"argv": ["touch", self.marker]}

    def assert_marker_never_appears(self, wait=1.0):
        time.sleep(wait)
        self.assertFalse(os.path.exists(self.marker), "a method ran for an unauthenticated client")


class CurveAuthTest(CurveTestCase):
    def test_agent_logs_its_public_key_and_a_real_port(self):
        self.assertNotEqual(self.tcp, "tcp://127.0.0.1:0")
        self.assertTrue(self.tcp.startswith("tcp://127.0.0.1:"))
        record = next(r for r in self.agent.log_records() if r.get("msg") == "rpc listening")
        self.assertEqual(record["public_key"], self.server_public)

    def test_authorized_key_works(self):
        client = self.connect_tcp()
        self.assertEqual(client.public_key, self.keys[0])
        self.assertEqual(client.call("sys.ping", over="tcp"), {"pong": True, "echo": {"over": "tcp"}})
        self.assertEqual(client.call("proc.exec", **self.touch_marker_params())["exit_code"], 0)
        self.assertTrue(os.path.exists(self.marker))

    def test_public_key_is_derived_from_the_secret(self):
        client = gpubox.Client(self.tcp, server_public_key=self.server_public, client_secret_key=self.keys[1])
        self.addCleanup(client.close)
        self.assertEqual(client.public_key, self.keys[0])
        self.assertTrue(client.call("sys.ping")["pong"])

    def test_ipc_needs_no_keys_beside_curve_tcp(self):
        self.assertTrue(self.connect().call("sys.ping")["pong"])

    def test_unknown_client_key_is_refused(self):
        stranger = gpubox.keygen()
        started = time.monotonic()
        with self.assertRaises(gpubox.RpcError) as caught:
            self.connect_tcp(keys=stranger)
        self.assertEqual(caught.exception.code, "permission_denied")
        self.assertLess(time.monotonic() - started, 5)
        # Without waiting for the handshake the CALL is sent into the void.
        client = self.connect_tcp(keys=stranger, connect_timeout=0)
        client.stream("proc.exec", **self.touch_marker_params())
        self.assert_marker_never_appears()

    def test_generated_client_key_is_refused(self):
        with self.assertRaises(gpubox.RpcError) as caught:
            gpubox.Client(self.tcp, server_public_key=self.server_public)
        self.assertEqual(caught.exception.code, "permission_denied")

    def test_wrong_server_key_never_connects(self):
        wrong_server = gpubox.keygen()[0]
        started = time.monotonic()
        with self.assertRaises(gpubox.RpcError) as caught:
            self.connect_tcp(server_public_key=wrong_server, connect_timeout=1.0)
        self.assertEqual(caught.exception.code, "unavailable")
        self.assertLess(time.monotonic() - started, 3)
        client = self.connect_tcp(server_public_key=wrong_server, connect_timeout=0)
        client.stream("proc.exec", **self.touch_marker_params())
        self.assert_marker_never_appears()

    def test_no_key_at_all_gets_nothing_run(self):
        # A plain (NULL mechanism) DEALER, as a client that ignores CURVE would be.
        context = zmq.Context()
        self.addCleanup(context.destroy, 0)
        socket = context.socket(zmq.DEALER)
        self.addCleanup(socket.close, 0)
        socket.setsockopt(zmq.LINGER, 0)
        socket.connect(self.tcp)
        socket.send_multipart([encode_header(Header(1, Kind.CALL, "proc.exec")),
                               encode_body(self.touch_marker_params())])
        self.assertEqual(socket.poll(1000), 0, "the agent answered a client without CURVE")
        self.assert_marker_never_appears(wait=0)

    def test_key_removed_while_connected(self):
        client = self.connect_tcp()
        other = self.connect_tcp(keys=self.other_keys)
        self.assertTrue(client.call("sys.ping")["pong"])
        self.write_authorized([self.other_keys[0]])
        time.sleep(0.1)  # the agent re-reads the file at most every 20 ms
        self.assertRaisesRpc("permission_denied", client.call, "sys.ping")
        self.assertRaisesRpc("permission_denied", client.call, "proc.exec", **self.touch_marker_params())
        self.assertFalse(os.path.exists(self.marker))
        self.assertTrue(other.call("sys.ping")["pong"], "a key still listed keeps working")
        # Listed again: admitted again.
        self.write_authorized([self.keys[0], self.other_keys[0]])
        time.sleep(0.1)
        self.assertTrue(client.call("sys.ping")["pong"])

    def test_a_missing_file_authorizes_nobody(self):
        client = self.connect_tcp()
        os.remove(self.authorized_file)
        time.sleep(0.1)
        self.assertRaisesRpc("permission_denied", client.call, "sys.ping")


class ConcurrencyTest(CurveTestCase):
    def assert_ping_not_delayed_by_sleep(self, sleeper, pinger):
        sleeping = sleeper.stream("proc.exec", argv=["sleep", "2"])
        time.sleep(0.2)  # the sleep is running
        started = time.monotonic()
        latencies = []
        while time.monotonic() - started < 1.0:
            before = time.monotonic()
            self.assertTrue(pinger.call("sys.ping")["pong"])
            latencies.append(time.monotonic() - before)
            time.sleep(0.05)
        self.assertLess(max(latencies), 0.5, latencies)
        self.assertFalse(sleeping.ended)
        self.assertEqual(sleeping.result["exit_code"], 0)

    def test_sleep_on_one_tcp_client_does_not_delay_ping_on_another(self):
        self.assert_ping_not_delayed_by_sleep(self.connect_tcp(), self.connect_tcp(keys=self.other_keys))

    def test_sleep_on_one_ipc_client_does_not_delay_ping_on_another(self):
        self.assert_ping_not_delayed_by_sleep(self.connect(), self.connect())

    def test_many_clients_at_once(self):
        clients = [self.connect_tcp() for _ in range(4)] + [self.connect() for _ in range(4)]
        streams = [c.stream("proc.exec", argv=["sh", "-c", "sleep 0.5; echo %d" % i]) for i, c in enumerate(clients)]
        started = time.monotonic()
        outputs = [s.result["stdout"] for s in streams]
        self.assertEqual(outputs, [b"%d\n" % i for i in range(len(clients))])
        self.assertLess(time.monotonic() - started, 2.5, "the sleeps ran one after another")


class CurveBulkTest(CurveTestCase):
    """Large frames both ways between this client's stock libzmq (Debian's,
    through pyzmq) and the agent's libzmq, whose CURVE encode and decode work
    in place (scripts/zmq-patches): byte for byte, at sizes around the
    header/MAC/flags offsets and past the decoder's buffer."""

    def test_bulk_frames_round_trip_byte_for_byte(self):
        client = self.connect_tcp()
        pieces = [os.urandom(n) for n in (1, 32, 33, 34, 4096, 8193, (1 << 20) + 7, 3 << 20, 0, 5)]
        content = b"".join(pieces)
        path = os.path.join(self.scratch, "bulk.bin")
        with client.stream("fs.write", path=path, size=len(content),
                           sha256=hashlib.sha256(content).hexdigest()) as upload:
            for piece in pieces:
                upload.send({}, [piece])
            upload.send({"eof": True})
            self.assertEqual(upload.result["size"], len(content))
        with open(path, "rb") as f:
            self.assertEqual(f.read(), content)
        received = b"".join(b"".join(chunk.attachments) for chunk in client.stream("fs.read", path=path))
        self.assertEqual(received, content)


if __name__ == "__main__":
    unittest.main()
