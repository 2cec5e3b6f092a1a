"""`gpubox mcp` over a raw pipe: Debian's /usr/bin/python3 writes bytes to the
server's stdin and reads its stdout line by line. Malformed JSON-RPC, an
unknown tool, bad arguments, version negotiation of both generations
(initialize and 2026-07-28's server/discover and per-request _meta), a
cancelled while-True cell that is interrupted (the kernel answers after),
calls that run concurrently, and that PID 1 and the sandbox survive it all.
Needs root (local sandboxes), GPUBOX_CLI and GPUBOX_AGENT."""

import json
import os
import select
import subprocess
import time
import unittest

from mcp_harness import CLI, SandboxHome, become_subreaper, validate_notebook


class McpPipe:
    """One `gpubox mcp` child; every line it writes must be one JSON-RPC message."""

    def __init__(self, home, *args):
        self.process = subprocess.Popen([CLI, "mcp", *args], env=home.env, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.buffer = b""
        self.seen = []  # every message, in order

    def send_bytes(self, data):
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def send(self, message):
        self.send_bytes(json.dumps(message).encode() + b"\n")

    def request(self, id, method, params=None):
        message = {"jsonrpc": "2.0", "id": id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)

    def next_message(self, timeout):
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self.process.stdout], [], [], left)
            if not ready:
                return None
            chunk = os.read(self.process.stdout.fileno(), 65536)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        message = json.loads(line)  # a line that is not JSON fails the test here
        assert message.get("jsonrpc") == "2.0", message
        self.seen.append(message)
        return message

    def response(self, id, timeout=60):
        """The response to id; notifications and other responses on the way are kept in seen."""
        deadline = time.monotonic() + timeout
        for message in self.seen:
            if message.get("id") == id and "method" not in message:
                return message
        while time.monotonic() < deadline:
            message = self.next_message(deadline - time.monotonic())
            if message is None:
                break
            if message.get("id") == id and "method" not in message:
                return message
        raise AssertionError("no response to id %r in %s s (seen: %s)" % (id, timeout, self.seen[-5:]))

    def call(self, id, tool, arguments, meta=None, timeout=60):
        params = {"name": tool, "arguments": arguments}
        if meta:
            params["_meta"] = meta
        self.request(id, "tools/call", params)
        return self.response(id, timeout)

    def close(self):
        self.process.stdin.close()
        code = self.process.wait(timeout=60)
        self.process.stdout.close()
        self.process.stderr.close()
        return code


def setUpModule():
    become_subreaper()


class RawPipeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.home = SandboxHome()
        cls.agent_pid = cls.home.agent_pid()
        assert cls.agent_pid, cls.home.box()

    @classmethod
    def tearDownClass(cls):
        cls.home.close()

    def setUp(self):
        self.pipe = McpPipe(self.home, "--sandbox", self.home.id, "--notebook-dir", self.home.notebooks)
        self.pipe.request(0, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                            "clientInfo": {"name": "raw", "version": "1"}})
        self.assertEqual(self.pipe.response(0)["result"]["protocolVersion"], "2025-11-25")
        self.pipe.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def tearDown(self):
        self.assertEqual(self.pipe.close(), 0)
        # PID 1 of the sandbox lives through everything each test sent.
        self.assertEqual(self.home.state_of(), "running")
        self.assertEqual(self.home.agent_pid(), self.agent_pid)

    def error_of(self, id):
        message = self.pipe.response(id)
        self.assertIn("error", message, message)
        return message["error"]

    def test_malformed_json_rpc(self):
        self.pipe.send_bytes(b"{not json\n")
        reply = self.pipe.next_message(30)
        self.assertEqual(reply["error"]["code"], -32700)
        self.assertIsNone(reply["id"])
        self.pipe.send_bytes(b"\xff\xfe\x00garbage\n")
        self.assertEqual(self.pipe.next_message(30)["error"]["code"], -32700)
        self.pipe.send_bytes(b"[" * 100000 + b"\n")  # deeply nested and unterminated
        self.assertEqual(self.pipe.next_message(30)["error"]["code"], -32600)
        deep = 1000000  # valid JSON, nested a million deep (its parsed value would recurse)
        self.pipe.send_bytes(b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":' + b"[" * deep + b"]" * deep + b"}}\n")
        reply = self.pipe.next_message(30)
        self.assertEqual(reply["error"]["code"], -32600)
        self.assertIn("nested deeper", reply["error"]["message"])
        self.pipe.send([{"jsonrpc": "2.0", "id": 1, "method": "ping"}])  # batches were removed from MCP
        self.assertEqual(self.pipe.next_message(30)["error"]["code"], -32600)
        self.pipe.send({"jsonrpc": "1.0", "id": 2, "method": "ping"})
        self.assertEqual(self.error_of(2)["code"], -32600)
        self.pipe.send({"jsonrpc": "2.0", "id": {"x": 1}, "method": "ping"})
        self.assertEqual(self.pipe.next_message(30)["error"]["code"], -32600)
        self.pipe.send({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": [1, 2]})
        self.assertEqual(self.error_of(3)["code"], -32602)
        self.pipe.request(4, "resources/list")
        error = self.error_of(4)
        self.assertEqual(error["code"], -32601)
        self.assertIn("resources/list", error["message"])
        self.pipe.send_bytes(b"\n\n   \n")  # blank lines are no messages
        self.pipe.request(5, "ping")
        self.assertEqual(self.pipe.response(5)["result"], {})

    def test_unknown_tool_and_bad_arguments(self):
        error = self.pipe.call(1, "no_such_tool", {})["error"]
        self.assertEqual(error["code"], -32602)
        self.assertIn("no_such_tool", error["message"])
        error = self.pipe.call(2, "execute_code", {"code": 3})["error"]
        self.assertEqual(error["code"], -32602)
        self.assertIn("arguments.code: expected a string", error["message"])
        self.assertEqual(error["data"]["field"], "arguments.code")
        error = self.pipe.call(3, "execute_code", {})["error"]
        self.assertIn("arguments.code: required", error["message"])
        error = self.pipe.call(4, "exec", {"command": "true", "colour": "red"})["error"]
        self.assertIn("arguments.colour: unknown argument", error["message"])
        error = self.pipe.call(5, "list_files", {"depth": 0})["error"]
        self.assertIn("arguments.depth: must be at least 1", error["message"])
        error = self.pipe.call(6, "create_sandbox", {"network": "everywhere"})["error"]
        self.assertIn("arguments.network: expected one of", error["message"])
        # A call the schema lets through but the sandbox refuses is a tool error, not a protocol error.
        result = self.pipe.call(7, "read_file", {"path": "/no/such/file"})["result"]
        self.assertTrue(result["isError"])
        self.assertIn("not_found", result["structuredContent"]["details"]["code"])
        result = self.pipe.call(8, "exec", {"sandbox_id": "no-such-box", "command": "true"})["result"]
        self.assertTrue(result["isError"])
        self.assertIn("no-such-box", result["structuredContent"]["error"])

    def test_version_negotiation_both_generations(self):
        self.pipe.request(1, "initialize", {"protocolVersion": "1999-01-01", "capabilities": {},
                                            "clientInfo": {"name": "old", "version": "1"}})
        self.assertEqual(self.pipe.response(1)["result"]["protocolVersion"], "2025-11-25")
        self.pipe.request(2, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                            "clientInfo": {"name": "mid", "version": "1"}})
        self.assertEqual(self.pipe.response(2)["result"]["protocolVersion"], "2025-06-18")
        meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {}}
        self.pipe.request(3, "server/discover", {"_meta": meta})
        discovered = self.pipe.response(3)["result"]
        self.assertIn("2026-07-28", discovered["supportedVersions"])
        self.assertIn("2025-11-25", discovered["supportedVersions"])
        self.assertEqual(discovered["resultType"], "complete")
        self.assertIn("tools", discovered["capabilities"])
        self.assertIn("ttlMs", discovered)
        self.pipe.request(4, "tools/list", {"_meta": meta, "cursor": "anything"})
        listed = self.pipe.response(4)["result"]
        self.assertEqual(listed["resultType"], "complete")
        self.assertIn("execute_code", [tool["name"] for tool in listed["tools"]])
        called = self.pipe.call(5, "execute_code", {"code": "6*7"}, meta=meta)["result"]
        self.assertEqual(called["resultType"], "complete")
        self.assertEqual(called["structuredContent"]["results"], ["42"])
        error = self.pipe.call(6, "execute_code", {"code": "1"},
                               meta={"io.modelcontextprotocol/protocolVersion": "2031-01-01"})["error"]
        self.assertEqual(error["code"], -32022)
        self.assertEqual(error["data"]["requested"], "2031-01-01")
        self.assertIn("2026-07-28", error["data"]["supported"])

    def test_cancelled_call_interrupts_the_cell(self):
        self.pipe.call(1, "execute_code", {"code": "import time\nbefore = 1"})
        self.pipe.request(2, "tools/call", {"name": "execute_code", "arguments": {"code": "while True:\n    pass"},
                                            "_meta": {"progressToken": "spin"}})
        # The loop prints nothing: the keepalive progress arrives after 5 s.
        progress = None
        deadline = time.monotonic() + 20
        while progress is None and time.monotonic() < deadline:
            message = self.pipe.next_message(deadline - time.monotonic())
            if message and message.get("method") == "notifications/progress":
                progress = message["params"]
        self.assertIsNotNone(progress, "no progress notification while the cell ran")
        self.assertEqual(progress["progressToken"], "spin")
        self.pipe.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2, "reason": "test"}})
        # The kernel answers again, and the cancelled request gets no response (MCP, "Cancellation").
        after = self.pipe.call(3, "execute_code", {"code": "before + 1"}, timeout=60)["result"]
        self.assertEqual(after["structuredContent"]["results"], ["2"])
        self.pipe.request(4, "ping")
        self.pipe.response(4)
        self.assertFalse([m for m in self.pipe.seen if m.get("id") == 2 and "method" not in m])
        # The interrupted cell is in the notebook with its KeyboardInterrupt.
        book = validate_notebook(after["structuredContent"]["notebook"])
        spin = [cell for cell in book["cells"] if "while True" in "".join(cell["source"])]
        self.assertEqual(spin[-1]["outputs"][-1]["ename"], "KeyboardInterrupt")

    def test_cancelled_exec_kills_the_command(self):
        self.pipe.request(1, "tools/call", {"name": "exec", "arguments": {"command": "sleep 271"}})
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            listed = self.pipe.call(2, "processes", {})["result"]["structuredContent"]["processes"]
            self.pipe.seen = [m for m in self.pipe.seen if m.get("id") != 2]
            if any("271" in " ".join(p["cmdline"]) for p in listed):
                break
            time.sleep(0.2)
        else:
            self.fail("sleep 271 never ran")
        self.pipe.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}})
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            listed = self.pipe.call(3, "processes", {})["result"]["structuredContent"]["processes"]
            self.pipe.seen = [m for m in self.pipe.seen if m.get("id") != 3]
            if not any("271" in " ".join(p["cmdline"]) for p in listed):
                break
            time.sleep(0.2)
        else:
            self.fail("the cancelled command still runs")
        self.assertFalse([m for m in self.pipe.seen if m.get("id") == 1 and "method" not in m])

    def test_end_of_input_stops_running_calls(self):
        self.pipe.request(1, "tools/call", {"name": "exec", "arguments": {"command": "sleep 272"}})
        self.pipe.request(2, "tools/call", {"name": "execute_code", "arguments": {"code": "import time\ntime.sleep(300)"}})
        time.sleep(1.0)
        started = time.monotonic()
        self.assertEqual(self.pipe.close(), 0)
        self.assertLess(time.monotonic() - started, 15)
        self.pipe = McpPipe(self.home, "--sandbox", self.home.id)  # for tearDown, and to see the kernel answer
        after = self.pipe.call(3, "execute_code", {"code": "'free'"})["result"]
        self.assertEqual(after["structuredContent"]["results"], ["'free'"])
        listed = self.pipe.call(4, "processes", {})["result"]["structuredContent"]["processes"]
        self.assertFalse([p for p in listed if "272" in " ".join(p["cmdline"])])

    def test_calls_run_concurrently(self):
        started = time.monotonic()
        self.pipe.call(1, "execute_code", {"code": "import time"})
        self.pipe.request(2, "tools/call", {"name": "execute_code", "arguments": {"code": "time.sleep(4)"}})
        time.sleep(0.5)
        listed = self.pipe.call(3, "exec", {"command": "echo quick"})
        quick = time.monotonic()
        self.assertEqual(listed["result"]["structuredContent"]["stdout"], "quick\n")
        self.pipe.request(4, "tools/list")
        self.pipe.response(4)
        slow = self.pipe.response(2, timeout=60)
        self.assertEqual(slow["result"]["structuredContent"]["status"], "ok")
        order = [m.get("id") for m in self.pipe.seen if "method" not in m]
        self.assertLess(order.index(3), order.index(2), "the quick exec waited for the sleeping cell")
        self.assertLess(quick - started, 4.0)

    def test_duplicate_in_flight_id_and_stray_response(self):
        self.pipe.request(9, "tools/call", {"name": "execute_code", "arguments": {"code": "import time; time.sleep(2)"}})
        time.sleep(0.3)
        self.pipe.request(9, "tools/call", {"name": "exec", "arguments": {"command": "true"}})
        first = self.pipe.response(9)
        self.assertEqual(first["error"]["code"], -32600)
        self.pipe.seen.remove(first)
        self.assertEqual(self.pipe.response(9)["result"]["structuredContent"]["status"], "ok")
        self.pipe.send({"jsonrpc": "2.0", "id": 77, "result": {}})  # a response to nothing: ignored
        self.pipe.request(10, "ping")
        self.assertEqual(self.pipe.response(10)["result"], {})


class CommandLineTest(unittest.TestCase):
    """`gpubox mcp`'s own arguments, and --service on a sandbox that serves nothing."""

    @classmethod
    def setUpClass(cls):
        cls.home = SandboxHome()

    @classmethod
    def tearDownClass(cls):
        cls.home.close()

    def test_usage_errors_exit_2_before_serving(self):
        for args, words in ((["--service", "calc"], "--service needs --sandbox"),
                            (["--sandbox", "no-such-box"], "no-such-box"),
                            (["--colour"], "--colour: unknown option"),
                            (["extra"], "unexpected argument")):
            ran = self.home.cli("mcp", *args)
            self.assertEqual(ran.returncode, 2, args)
            self.assertIn(words, ran.stderr)
            self.assertEqual(ran.stdout, "")  # stdout is for MCP messages only
        helped = self.home.cli("mcp", "--help")
        self.assertEqual(helped.returncode, 0)
        self.assertIn("--notebook-dir", helped.stdout)

    def test_service_that_is_not_served(self):
        pipe = McpPipe(self.home, "--sandbox", self.home.id, "--service", "nothing-here")
        pipe.request(1, "tools/list")
        error = pipe.response(1)["error"]
        self.assertEqual(error["code"], -32603)
        self.assertIn("cannot list the tools", error["message"])
        error = pipe.call(2, "anything", {})["error"]
        self.assertEqual(error["code"], -32603)
        pipe.request(3, "ping")
        self.assertEqual(pipe.response(3)["result"], {})
        self.assertEqual(pipe.close(), 0)
        self.assertEqual(self.home.state_of(), "running")


if __name__ == "__main__":
    unittest.main()
