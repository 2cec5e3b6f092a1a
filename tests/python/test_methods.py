"""sys.* and proc.* against the real agent, over its ipc endpoint."""

import os
import threading
import time
import unittest
from unittest import mock

from agent_harness import AgentTestCase, wait_until
import gpubox
from gpubox import _transport


class ConnectTest(AgentTestCase):
    def test_missing_socket_is_unavailable_at_once(self):
        started = time.monotonic()
        with self.assertRaises(gpubox.RpcError) as caught:
            gpubox.Client("ipc://%s/no-such.sock" % self.scratch)
        self.assertEqual(caught.exception.code, "unavailable")
        self.assertLess(time.monotonic() - started, 1.0)

    def test_bad_arguments_raise_value_error(self):
        with self.assertRaises(ValueError):
            gpubox.Client("http://localhost:1")
        with self.assertRaises(ValueError):
            gpubox.Client("tcp://127.0.0.1:1")  # no server key
        client = self.connect()
        with self.assertRaises(ValueError):
            client.call("sys.ping", timeout=0)
        with self.assertRaises(ValueError):
            client.stream("sys.ping", window=0)

    def test_context_manager_closes(self):
        with gpubox.Client(self.agent.ipc) as client:
            self.assertTrue(client.call("sys.ping")["pong"])
        self.assertRaisesRpc("unavailable", client.call, "sys.ping")


class SharedClientTest(AgentTestCase):
    """One Client used by 8 threads at once (it once hung: two threads read its one socket),
    through pyzmq's socket and through the pure-Python one."""

    def hammer(self, client):
        results, failures = {}, []

        def work(thread):
            try:
                for i in range(25):
                    key = "%d-%d" % (thread, i)
                    results[key] = client.call("sys.ping", key=key)["echo"]["key"]
                    ran = client.call("proc.exec", argv=["echo", key], timeout=30)
                    results[key + "-exec"] = ran["stdout"]
            except Exception as e:  # reported below, with the thread
                failures.append((thread, repr(e)))
        threads = [threading.Thread(target=work, args=(t,), daemon=True) for t in range(8)]
        for thread in threads:
            thread.start()
        give_up = time.monotonic() + 60
        for thread in threads:
            thread.join(timeout=max(0, give_up - time.monotonic()))
        self.assertFalse(any(t.is_alive() for t in threads), "a thread is still waiting for its answer")
        self.assertEqual(failures, [])
        for t in range(8):
            for i in range(25):
                key = "%d-%d" % (t, i)
                self.assertEqual(results[key], key)
                self.assertEqual(results[key + "-exec"], (key + "\n").encode())

    def test_one_client_from_eight_threads(self):
        with gpubox.Client(self.agent.ipc) as client:
            self.hammer(client)

    def test_one_pure_python_client_from_eight_threads(self):
        with mock.patch.object(_transport, "zmq", None):
            client = gpubox.Client(self.agent.ipc)
        with client:
            self.assertIsInstance(client._socket, _transport.UnixDealer)
            self.hammer(client)


class SysTest(AgentTestCase):
    def test_ping_echoes_params(self):
        client = self.connect()
        self.assertEqual(client.call("sys.ping"), {"pong": True})
        params = {"n": 42, "s": "h\u00e9", "b": b"\x00\x01\xff", "list": [1, "two", None], "map": {"x": 1.5}}
        self.assertEqual(client.call("sys.ping", **params), {"pong": True, "echo": params})
        # Params that clash with call()'s own keywords go through params=.
        self.assertEqual(client.call("sys.ping", params={"timeout": 1, "params": 2})["echo"],
                         {"timeout": 1, "params": 2})

    def test_info_fields(self):
        info = self.connect().call("sys.info")
        self.assertIsInstance(info["agent_version"], str)
        self.assertTrue(info["agent_version"])
        self.assertEqual(info["protocol_version"], 1)
        self.assertEqual(info["pid"], self.agent.process.pid)
        self.assertGreaterEqual(info["uptime_s"], 0)
        self.assertEqual(info["limits"], {"max_message_bytes": 64 << 20, "max_body_bytes": 1 << 20,
                                          "max_in_flight": 256, "max_attachments": 64})
        self.assertEqual(info["components"]["rpc"]["state"], "ready")
        for name in ("sys.ping", "sys.info", "proc.exec", "proc.spawn", "proc.list", "proc.signal"):
            self.assertIn(name, info["methods"])

    def test_unknown_method(self):
        error = self.assertRaisesRpc("unknown_method", self.connect().call, "sys.nope")
        self.assertIn("sys.nope", error.message)

    def test_bad_params_name_the_field(self):
        client = self.connect()
        cases = [
            ("argv", {"argv": "echo"}),
            ("cwd", {"argv": ["true"], "cwd": "relative/dir"}),
            ("timeout_s", {"argv": ["true"], "timeout_s": "soon"}),
            ("env", {"argv": ["true"], "env": {"A": 1}}),
            ("bogus", {"argv": ["true"], "bogus": 1}),
            ("argv", {}),  # neither argv nor shell
        ]
        for field, params in cases:
            with self.subTest(field=field, params=params):
                error = self.assertRaisesRpc("invalid_request", client.call, "proc.exec", params=params)
                self.assertIn(field, error.message)
        error = self.assertRaisesRpc("invalid_request", client.call, "sys.info", extra=1)
        self.assertIn("extra", error.message)

    def test_error_leaves_the_connection_usable(self):
        client = self.connect()
        self.assertRaisesRpc("unknown_method", client.call, "nope")
        self.assertEqual(client.call("sys.ping", n=1)["echo"], {"n": 1})


class ExecTest(AgentTestCase):
    def test_stdout_stderr_and_exit_code(self):
        result = self.connect().call("proc.exec", argv=["/bin/sh", "-c", "echo out; echo err >&2; exit 3"])
        self.assertEqual(result["stdout"], b"out\n")
        self.assertEqual(result["stderr"], b"err\n")
        self.assertEqual(result["exit_code"], 3)
        self.assertIsNone(result["signal"])
        self.assertFalse(result["timed_out"])
        self.assertFalse(result["stdout_truncated"])
        self.assertFalse(result["stderr_truncated"])
        self.assertIsInstance(result["pid"], int)
        self.assertGreaterEqual(result["wall_s"], 0)

    def test_killed_by_a_signal(self):
        result = self.connect().call("proc.exec", shell="kill -TERM $$")
        self.assertIsNone(result["exit_code"])
        self.assertEqual(result["signal"], 15)

    def test_stdin_bytes(self):
        client = self.connect()
        data = bytes(range(256)) * 64
        self.assertEqual(client.call("proc.exec", argv=["cat"], stdin=data)["stdout"], data)
        self.assertEqual(client.call("proc.exec", argv=["cat"], stdin="text")["stdout"], b"text")
        self.assertEqual(client.call("proc.exec", argv=["cat"])["stdout"], b"")  # default: empty, closed

    def test_timeout_s_kills_and_reports_timed_out(self):
        started = time.monotonic()
        result = self.connect().call("proc.exec", argv=["sleep", "30"], timeout_s=0.3)
        self.assertTrue(result["timed_out"])
        self.assertEqual(result["signal"], 9)
        self.assertLess(time.monotonic() - started, 5)

    def test_env_and_cwd(self):
        result = self.connect().call("proc.exec", shell='printf "%s|" "$GPUBOX_PY_TEST"; pwd',
                                     env={"GPUBOX_PY_TEST": "v a l"}, cwd=self.scratch)
        self.assertEqual(result["stdout"].decode(), "v a l|%s\n" % os.path.realpath(self.scratch))

    def test_max_output_bytes_truncates(self):
        result = self.connect().call("proc.exec", shell="head -c 10000 /dev/zero", max_output_bytes=100)
        self.assertEqual(result["stdout"], b"\0" * 100)
        self.assertTrue(result["stdout_truncated"])
        self.assertEqual(result["exit_code"], 0)

    def test_missing_program_is_not_found(self):
        error = self.assertRaisesRpc("not_found", self.connect().call, "proc.exec", argv=["/no/such/program"])
        self.assertIn("/no/such/program", error.message)


class SpawnTest(AgentTestCase):
    def read_all(self, stream):
        """(pid, stdout, stderr, number of output chunks) of a whole stream."""
        first = next(stream)
        self.assertEqual(set(first.body), {"pid"}, "the first DATA names the pid")
        output = {"stdout": b"", "stderr": b""}
        chunks = 0
        for body, attachments in stream:
            self.assertEqual(len(attachments), 1)
            output[body["stream"]] += attachments[0]
            chunks += 1
        return first.body["pid"], output["stdout"], output["stderr"], chunks

    def test_chunks_arrive_in_order(self):
        client = self.connect()
        stream = client.stream("proc.spawn", shell="for i in 1 2 3 4 5; do echo $i; echo e$i >&2; sleep 0.05; done")
        pid, out, err, chunks = self.read_all(stream)
        self.assertEqual(out, b"1\n2\n3\n4\n5\n")
        self.assertEqual(err, b"e1\ne2\ne3\ne4\ne5\n")
        self.assertGreaterEqual(chunks, 10)
        result = stream.result
        self.assertEqual(result["exit_code"], 0)
        self.assertEqual(result["pid"], pid)
        self.assertNotIn("stdout", result)

    def test_small_window_still_gets_everything(self):
        # Many more chunks than the window: the client must keep granting credit.
        client = self.connect()
        stream = client.stream("proc.spawn", shell="i=0; while [ $i -lt 60 ]; do echo $i; i=$((i+1)); sleep 0.005; done",
                               window=2)
        _, out, _, chunks = self.read_all(stream)
        self.assertEqual(out, b"".join(b"%d\n" % i for i in range(60)))
        self.assertGreater(chunks, 2)
        self.assertEqual(stream.result["exit_code"], 0)

    def test_stdin_send_and_eof(self):
        client = self.connect()
        with client.stream("proc.spawn", argv=["cat"]) as stream:
            self.assertIn("pid", next(stream).body)
            stream.send({"stdin": b"one\n"})
            stream.send(attachments=[b"two\n"])
            stream.send({"stdin": "three\n"})
            stream.send({"eof": True})
            _out = b"".join(attachments[0] for body, attachments in stream if body["stream"] == "stdout")
            self.assertEqual(_out, b"one\ntwo\nthree\n")
            self.assertEqual(stream.result["exit_code"], 0)

    def test_much_stdin_without_reading_does_not_stall(self):
        # 200 sends against a stdin window of 16 while cat echoes each line
        # back and nobody reads: send() must keep both directions moving.
        client = self.connect()
        lines = [b"line %03d\n" % i for i in range(200)]
        stream = client.stream("proc.spawn", argv=["cat"], window=4, timeout=30)
        for line in lines:
            stream.send({"stdin": line})
        stream.send({"eof": True})
        _, out, _, _ = self.read_all(stream)
        self.assertEqual(out, b"".join(lines))
        self.assertEqual(stream.result["exit_code"], 0)

    def test_signal_via_data(self):
        client = self.connect()
        stream = client.stream("proc.spawn", argv=["sleep", "30"])
        next(stream)
        started = time.monotonic()
        stream.send({"signal": 15})
        self.assertEqual(list(stream), [])
        result = stream.result
        self.assertEqual(result["signal"], 15)
        self.assertIsNone(result["exit_code"])
        self.assertLess(time.monotonic() - started, 3)

    def test_send_after_the_end_raises(self):
        client = self.connect()
        stream = client.stream("proc.spawn", argv=["true"])
        self.assertEqual(stream.result["exit_code"], 0)
        self.assertRaisesRpc("invalid_request", stream.send, {"eof": True})

    def test_tty_runs_on_a_pty_of_the_given_size_and_resizes(self):
        client = self.connect()
        stream = client.stream("proc.spawn", argv=["sh", "-c", "tty; stty size; read line; stty size; echo got $line"],
                               tty=True, rows=33, cols=99, timeout=30)
        next(stream)
        output = b""
        resized = False
        for body, attachments in stream:
            self.assertEqual(body["stream"], "stdout", "a terminal merges stdout and stderr")
            output += attachments[0]
            if b"33 99" in output and not resized:
                stream.send({"rows": 44, "cols": 111})
                stream.send({"stdin": b"hello\r"})  # typed: the terminal turns \r into \n
                resized = True
        self.assertEqual(stream.result["exit_code"], 0)
        self.assertIn(b"/dev/pts/", output)
        self.assertIn(b"44 111\r\n", output)
        self.assertIn(b"got hello\r\n", output)

    def test_tty_params_and_resizes_are_checked(self):
        client = self.connect()
        def spawn(**params):  # proc.spawn is a stream: call() refuses it
            with client.stream("proc.spawn", **params) as stream:
                return stream.result
        self.assertRaisesRpc("invalid_request", spawn, argv=["true"], rows=10)
        self.assertRaisesRpc("invalid_request", spawn, argv=["true"], tty=True, cols=0)
        self.assertRaisesRpc("invalid_request", client.call, "proc.exec", argv=["true"], tty=True)
        stream = client.stream("proc.spawn", argv=["sleep", "30"])
        next(stream)
        stream.send({"rows": 10, "cols": 10})
        error = self.assertRaisesRpc("invalid_request", lambda: stream.result)
        self.assertIn("no terminal", error.message)
        self.assertEqual(client.call("proc.exec", argv=["true"])["exit_code"], 0, "the agent is unharmed")

    def test_bad_stream_input_fails_the_request(self):
        client = self.connect()
        stream = client.stream("proc.spawn", argv=["sleep", "30"])
        next(stream)
        stream.send({"bogus": 1})
        error = self.assertRaisesRpc("invalid_request", lambda: stream.result)
        self.assertIn("bogus", error.message)


class CancelAndDeadlineTest(AgentTestCase):
    def test_cancel_stops_a_long_exec(self):
        client = self.connect()
        argv = ["sleep", "31.5"]
        stream = client.stream("proc.exec", argv=argv)
        self.assertTrue(wait_until(lambda: self.process_running(client, argv)))
        started = time.monotonic()
        stream.cancel()
        self.assertRaisesRpc("cancelled", lambda: stream.result)
        self.assertLess(time.monotonic() - started, 2)
        self.assertTrue(wait_until(lambda: not self.process_running(client, argv)), "the process was not killed")
        self.assertEqual(client.call("sys.ping", after="cancel")["echo"], {"after": "cancel"})

    def test_cancel_raises_from_iteration(self):
        client = self.connect()
        stream = client.stream("proc.spawn", argv=["sleep", "30"])
        next(stream)
        stream.cancel()
        with self.assertRaises(gpubox.RpcError) as caught:
            list(stream)
        self.assertEqual(caught.exception.code, "cancelled")

    def test_closing_a_stream_cancels_it(self):
        client = self.connect()
        argv = ["sleep", "32.5"]
        with client.stream("proc.exec", argv=argv):
            self.assertTrue(wait_until(lambda: self.process_running(client, argv)))
        self.assertTrue(wait_until(lambda: not self.process_running(client, argv)))

    def test_deadline_exceeded(self):
        client = self.connect()
        argv = ["sleep", "33.5"]
        started = time.monotonic()
        error = self.assertRaisesRpc("deadline_exceeded", client.call, "proc.exec", argv=argv, timeout=0.3)
        elapsed = time.monotonic() - started
        self.assertGreaterEqual(elapsed, 0.25)
        self.assertLess(elapsed, 3)
        self.assertTrue(error.message)
        self.assertTrue(wait_until(lambda: not self.process_running(client, argv)))

    def test_deadline_does_not_touch_quick_requests(self):
        self.assertEqual(self.connect().call("proc.exec", argv=["true"], timeout=5)["exit_code"], 0)


class MultiplexTest(AgentTestCase):
    def test_requests_interleave_on_one_connection(self):
        client = self.connect()
        slow = client.stream("proc.spawn", shell="echo a; sleep 0.3; echo b")
        self.assertIn("pid", next(slow).body)
        # While `slow` is in flight, other requests complete; its messages
        # that arrive meanwhile are kept for it.
        pings = [client.call("sys.ping", i=i)["echo"]["i"] for i in range(5)]
        self.assertEqual(pings, list(range(5)))
        other = client.stream("proc.exec", argv=["echo", "other"])
        out = b"".join(chunk.attachments[0] for chunk in slow)
        self.assertEqual(out, b"a\nb\n")
        self.assertEqual(other.result["stdout"], b"other\n")
        self.assertEqual(slow.result["exit_code"], 0)
        self.assertNotEqual(slow.id, other.id)

    def test_ping_is_not_delayed_by_a_sleep_on_the_same_connection(self):
        client = self.connect()
        sleeper = client.stream("proc.exec", argv=["sleep", "2"])
        time.sleep(0.1)
        started = time.monotonic()
        client.call("sys.ping")
        self.assertLess(time.monotonic() - started, 0.5)
        self.assertEqual(sleeper.result["exit_code"], 0)


if __name__ == "__main__":
    unittest.main()
