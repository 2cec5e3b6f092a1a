"""kernel.relay, the agent's half of `gpubox attach`, spoken directly with the
Python RPC client against a real agent (not PID 1): the hello with the
kernel's key, per-peer routing of replies, iopub with its topic, a
shutdown_request that never reaches the kernel, restart, and refusals."""
import json
import os
import sys
import time
import unittest

from jupyter_client.session import Session

import test_agent_kernel

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
import gpubox  # noqa: E402


class RelayCase(test_agent_kernel.AgentKernelCase):
    kernel_config = {"python": "/usr/bin/python3"}

    def open_relay(self):
        relay = self.client.stream("kernel.relay")
        self.addCleanup(relay.close)
        hello = next(relay).body
        return relay, Session(key=hello["kernel"]["key"].encode()), hello

    def send(self, relay, session, channel, peer, msg_type, content=None):
        msg = session.msg(msg_type, content or {})
        frames = session.serialize(msg)  # [<IDS|MSG>, signature, header, parent, metadata, content]
        relay.send({"ch": channel, "peer": peer}, frames[1:])
        return msg["header"]["msg_id"]

    def replies(self, relay, session, until_msg_type, timeout=30):
        """DATA items (body, message) up to the first reply of until_msg_type."""
        seen = []
        deadline = time.monotonic() + timeout
        for chunk in relay:
            self.assertLess(time.monotonic(), deadline, "no %s" % until_msg_type)  # keepalives included
            if chunk.body == {"alive": True}:
                continue
            message = session.deserialize(chunk.attachments)  # checks the kernel's signature
            seen.append((chunk.body, message))
            if message["msg_type"] == until_msg_type:
                return seen
        self.fail("the relay ended before a %s" % until_msg_type)


class KernelRelayTest(RelayCase):
    def test_hello_gives_the_kernels_key(self):
        _, _, hello = self.open_relay()
        with open(os.path.join(self.dir, "kernel.json")) as f:
            self.assertEqual(hello["kernel"]["key"], json.load(f)["key"])
        self.assertEqual(hello["kernel"]["signature_scheme"], "hmac-sha256")

    def test_replies_go_to_the_peer_that_asked_and_iopub_carries_its_topic(self):
        relay, session, _ = self.open_relay()
        first = self.send(relay, session, "shell", 1, "kernel_info_request")
        seen = self.replies(relay, session, "kernel_info_reply")
        body, reply = seen[-1]
        self.assertEqual(body, {"ch": "shell", "peer": 1})
        self.assertEqual(reply["parent_header"]["msg_id"], first)
        second = self.send(relay, session, "shell", 2, "execute_request", {"code": "print('relayed')", "silent": False})
        seen = self.replies(relay, session, "execute_reply")
        body, reply = seen[-1]
        self.assertEqual(body, {"ch": "shell", "peer": 2})
        self.assertEqual(reply["parent_header"]["msg_id"], second)
        streams = [(b, m) for b, m in seen if m["msg_type"] == "stream"]
        self.assertEqual([m["content"]["text"] for _, m in streams], ["relayed\n"])
        self.assertEqual(streams[0][0]["ch"], "iopub")
        self.assertIsInstance(streams[0][0]["topic"], list)

    def test_a_shutdown_request_never_reaches_the_kernel(self):
        relay, session, _ = self.open_relay()
        self.send(relay, session, "control", 1, "shutdown_request", {"restart": False})
        self.send(relay, session, "shell", 1, "kernel_info_request")
        seen = self.replies(relay, session, "kernel_info_reply")
        self.assertNotIn("shutdown_reply", [m["msg_type"] for _, m in seen])
        self.assertEqual(self.client.call("kernel.info")["implementation"], "gpubox")
        self.assertEqual(self.execute("1 + 1")[0]["status"], "ok")

    def test_restart(self):
        self.execute("before_restart = 1")
        relay, session, _ = self.open_relay()
        relay.send({"restart": True})
        restarted = next(relay).body
        self.assertEqual(restarted, {"restarted": 1})
        result, _ = self.execute("before_restart")
        self.assertEqual(result["ename"], "NameError")

    def test_close_then_the_peer_is_opened_again(self):
        relay, session, _ = self.open_relay()
        self.send(relay, session, "shell", 5, "kernel_info_request")
        self.replies(relay, session, "kernel_info_reply")
        relay.send({"close": 5})
        self.send(relay, session, "shell", 5, "kernel_info_request")
        self.assertEqual(self.replies(relay, session, "kernel_info_reply")[-1][0], {"ch": "shell", "peer": 5})

    def test_a_peer_reopened_while_the_kernel_is_busy_is_answered(self):
        """Peer 5 is closed and opened again while the kernel's shell thread runs
        peer 1's cell, so the kernel's ROUTER still holds peer 5's old connection
        when the new one arrives (libzmq lets it go only on that busy thread). A
        reused routing id was ignored there and the request never read: the
        reopened peer waited forever (kernel_test_kernel_relay's hang under ASan)."""
        relay, session, _ = self.open_relay()
        self.send(relay, session, "shell", 5, "kernel_info_request")
        self.replies(relay, session, "kernel_info_reply")
        busy = self.send(relay, session, "shell", 1, "execute_request",
                         {"code": "import time; time.sleep(2)", "silent": False})
        self.replies(relay, session, "execute_input")  # the shell thread is in the cell now
        relay.send({"close": 5})
        again = self.send(relay, session, "shell", 5, "kernel_info_request")
        seen = self.replies(relay, session, "kernel_info_reply")
        shell = [(body, m["msg_type"], m["parent_header"]["msg_id"]) for body, m in seen if body.get("ch") == "shell"]
        self.assertEqual(shell, [({"ch": "shell", "peer": 1}, "execute_reply", busy),
                                 ({"ch": "shell", "peer": 5}, "kernel_info_reply", again)])

    def test_at_most_64_peers_at_once(self):
        """The relay ends while the kernel still answers 64 requests for peers
        whose sockets are gone; the same agent's kernel keeps serving."""
        relay, session, _ = self.open_relay()
        for peer in range(64):
            self.send(relay, session, "shell", peer, "kernel_info_request")
        with self.assertRaises(gpubox.RpcError) as caught:
            self.send(relay, session, "shell", 64, "kernel_info_request")
            relay.result
        self.assertEqual(caught.exception.code, "resource_exhausted")
        self.assertIn("more than 64 frontends", caught.exception.message)
        relay, session, _ = self.open_relay()
        asked = self.send(relay, session, "shell", 0, "kernel_info_request")
        body, reply = self.replies(relay, session, "kernel_info_reply", timeout=10)[-1]
        self.assertEqual((body, reply["parent_header"]["msg_id"]), ({"ch": "shell", "peer": 0}, asked))
        self.assertEqual(self.execute("'still serving'")[0]["status"], "ok")

    def test_malformed_messages_end_the_relay_naming_the_problem(self):
        for body, attachments, expected in [
            ({"ch": "shell", "peer": 1}, [b"sig", b"{}"], "at least 5 attachments"),
            ({"ch": "iopub", "peer": 1}, [b"sig", b"{}", b"{}", b"{}", b"{}"], "ch: expected"),
            ({"ch": "shell", "peer": 1}, [b"sig", b"[]", b"{}", b"{}", b"{}"], "header) is not a JSON object"),
            ({"peer": 1}, [], "exactly one of"),
        ]:
            relay, _, _ = self.open_relay()
            relay.send(body, attachments)
            with self.assertRaises(gpubox.RpcError) as caught:
                relay.result
            self.assertEqual(caught.exception.code, "invalid_request")
            self.assertIn(expected, caught.exception.message)
        self.assertEqual(self.execute("'still serving'")[0]["status"], "ok")

    def test_keepalive_when_quiet(self):
        relay, _, _ = self.open_relay()
        start = time.monotonic()
        message = next(relay)
        # A status the kernel published as the relay opened (the last test's
        # cell going idle) is relayed first; the silence is counted from it.
        while message.body.get("ch") == "iopub":
            start = time.monotonic()
            message = next(relay)
        self.assertEqual(message.body, {"alive": True})
        self.assertGreater(time.monotonic() - start, 4)
        self.assertLess(time.monotonic() - start, 8)

    def test_params_are_refused(self):
        with self.assertRaises(gpubox.RpcError) as caught:
            self.client.call("kernel.relay", params={"peer": 1})
        self.assertEqual(caught.exception.code, "invalid_request")


class RelayWithoutKernelTest(RelayCase):
    kernel_config = {"enabled": False}

    def test_unavailable(self):
        with self.assertRaises(gpubox.RpcError) as caught:
            self.client.call("kernel.relay")
        self.assertEqual(caught.exception.code, "unavailable")
        self.assertIn("kernel is disabled", caught.exception.message)


if __name__ == "__main__":
    unittest.main()
