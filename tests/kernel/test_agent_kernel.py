"""The kernel inside the agent: config `kernel`, readiness in sys.info, the
kernel.* RPC methods (streamed outputs, hidden setup code replayed after a
restart, per-execution timeouts: interrupt first, then kill and restart), and a
Jupyter client on the agent's own kernel sockets (127.0.0.1 only)."""
import json
import os
import sys
import time
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
import gpubox  # noqa: E402
from agent_harness import AGENT, Agent  # noqa: E402,F401  (AGENT: for test_models)
from jupyter_client import BlockingKernelClient  # noqa: E402


class AgentKernelCase(unittest.TestCase):
    """Starts an agent (not PID 1) with kernel_config as its config's "kernel" section."""
    kernel_config = {}
    lifecycle_config = {}

    def setUp(self):
        self.agent = Agent(config={"kernel": self.kernel_config, "lifecycle": self.lifecycle_config})
        self.addCleanup(self.stop_agent)
        self.dir = self.agent.dir
        self.process = self.agent.process
        self.client = gpubox.Client(self.agent.ipc)
        self.addCleanup(self.client.close)

    def stop_agent(self):
        self.assertEqual(self.agent.stop(timeout=20), 0, "the agent exits 0 on SIGTERM, executor or not")

    def jupyter_client(self):
        """A blocking jupyter_client on the agent's kernel (its connection file), ready."""
        kc = BlockingKernelClient()
        kc.load_connection_file(os.path.join(self.dir, "kernel.json"))
        kc.start_channels()
        self.addCleanup(kc.stop_channels)
        kc.wait_for_ready(timeout=30)
        return kc

    def execute(self, code, **params):
        items = []
        with self.client.stream("kernel.execute", code=code, **params) as stream:
            for chunk in stream:
                items.append(chunk.body)
            result = stream.result
        return result, items


class AgentKernelTest(AgentKernelCase):
    kernel_config = {"python": "/usr/bin/python3", "setup_code": ["preset = 41"]}

    def test_readiness_in_sys_info(self):
        kernel = self.client.call("sys.info")["components"]["kernel"]
        self.assertEqual(kernel["state"], "ready")
        self.assertEqual(kernel["executor"], "not started", "the executor starts at first use")
        self.execute("1")
        self.assertEqual(self.client.call("sys.info")["components"]["kernel"]["executor"], "idle")

    def test_execute_streams_outputs_in_order(self):
        result, items = self.execute("import sys\nprint('out')\nprint('err', file=sys.stderr)\ndisplay({'a': 1}, raw=True)\n6 * 7")
        self.assertEqual(result["status"], "ok")
        self.assertEqual(items[0], {"stream": "stdout", "text": "out\n"})
        self.assertEqual(items[1], {"stream": "stderr", "text": "err\n"})
        self.assertEqual(items[2]["kind"], "display")
        self.assertEqual(items[2]["data"], {"a": 1})
        self.assertEqual(items[3]["kind"], "execute_result")
        self.assertEqual(items[3]["data"]["text/plain"], "42")

    def test_config_setup_code_ran(self):
        result, items = self.execute("preset + 1")
        self.assertEqual(items[-1]["data"]["text/plain"], "42")

    def test_error_result(self):
        result, items = self.execute("raise ValueError('bad value')")
        self.assertEqual(result["status"], "error")
        self.assertEqual((result["ename"], result["evalue"]), ("ValueError", "bad value"))
        self.assertEqual(items[-1]["kind"], "error")

    def test_hidden_setup_is_replayed_after_restart(self):
        result, _ = self.execute("from_setup = 'yes'", hidden=True, setup=True)
        self.assertEqual(result["status"], "ok")
        self.assertNotIn("execution_count", result)
        self.execute("scratch = 1")
        restarted = self.client.call("kernel.restart")
        self.assertEqual(restarted["restarts"], 1)
        _, items = self.execute("(from_setup, 'scratch' in globals(), preset)")
        self.assertEqual(items[-1]["data"]["text/plain"], "('yes', False, 41)")

    def test_timeout_interrupts(self):
        start = time.monotonic()
        result, _ = self.execute("import time; time.sleep(100)", timeout_s=1)
        self.assertLess(time.monotonic() - start, 5)
        self.assertEqual(result["ename"], "KeyboardInterrupt")
        self.assertTrue(result["timed_out"])
        self.assertEqual(self.execute("'after'")[0]["status"], "ok")

    def test_timeout_kills_code_that_ignores_interrupts(self):
        self.execute("kept = 1", hidden=True, setup=True)
        start = time.monotonic()
        result, _ = self.execute("import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: pass",
                                 timeout_s=1)
        self.assertLess(time.monotonic() - start, 15)
        self.assertTrue(result["died"])
        self.assertTrue(result["timed_out"])
        self.assertIn("timed out", result["evalue"])
        _, items = self.execute("kept + preset")
        self.assertEqual(items[-1]["data"]["text/plain"], "42")

    def test_crash_restarts_the_executor_not_the_agent(self):
        result, _ = self.execute("import os; os.abort()")
        self.assertTrue(result["died"])
        self.assertIn("SIGABRT", result["evalue"])
        self.assertIsNone(self.process.poll())
        self.assertEqual(self.execute("preset")[1][-1]["data"]["text/plain"], "41")

    def test_interrupt_method(self):
        self.execute("None")  # started: the interrupt finds the cell running, not the executor starting
        with self.client.stream("kernel.execute", code="import time; time.sleep(100)") as stream:
            time.sleep(1.5)
            self.assertTrue(self.client.call("kernel.interrupt")["interrupted"])
            result = stream.result
        self.assertEqual(result["ename"], "KeyboardInterrupt")

    def test_complete_inspect_info(self):
        self.execute("gpubox_thing = 3")
        completion = self.client.call("kernel.complete", code="gpubox_th")
        self.assertEqual(completion["matches"], ["gpubox_thing"])
        inspected = self.client.call("kernel.inspect", code="len")
        self.assertTrue(inspected["found"])
        info = self.client.call("kernel.info")
        self.assertEqual(info["implementation"], "gpubox")
        self.assertEqual(info["language_info"]["name"], "python")
        self.assertEqual(info["endpoints"]["ip"], "127.0.0.1")
        self.assertNotIn("key", info["endpoints"])

    def test_bad_params_are_refused(self):
        for params in ({}, {"code": 3}, {"code": "1", "timeout_s": -1}, {"code": "1", "setup": True},
                       {"code": "1", "color": "red"}):
            with self.assertRaises(gpubox.RpcError) as caught:
                self.client.call("kernel.execute", params=params)
            self.assertEqual(caught.exception.code, "invalid_request", params)

    def test_code_as_attachments_runs_a_cell_beyond_the_body_limit(self):
        code = "big = '" + "y" * (2 << 20) + "'\nprint(len(big))\n"
        with self.client.stream("kernel.execute", attachments=[code[:1000].encode(), code[1000:].encode()]) as stream:
            texts = [chunk.body.get("text", "") for chunk in stream]
            self.assertEqual(stream.result["status"], "ok")
        self.assertEqual("".join(texts), "%d\n" % (2 << 20))
        for params, attachments, words in (({"code": "1"}, [b"2"], "one of them"),
                                           ({}, [b"\xff\xfe"], "not UTF-8")):
            with self.assertRaises(gpubox.RpcError) as caught:
                self.client.call("kernel.execute", params=params, attachments=attachments)
            self.assertEqual(caught.exception.code, "invalid_request")
            self.assertIn(words, caught.exception.message)
        self.assertEqual(self.execute("print(preset)")[0]["status"], "ok", "the kernel is unharmed")

    def test_jupyter_client_on_the_agents_kernel(self):
        path = os.path.join(self.dir, "kernel.json")
        self.assertEqual(os.stat(path).st_mode & 0o777, 0o600)
        with open(path) as f:
            info = json.load(f)
        self.assertEqual(info["ip"], "127.0.0.1")
        kc = self.jupyter_client()
        outputs = []
        reply = kc.execute_interactive("print(preset + 1)", timeout=60,
                                       output_hook=lambda m: outputs.append(m["content"].get("text")))
        self.assertEqual(reply["content"]["status"], "ok")
        self.assertIn("42\n", outputs)


class RpcBroadcastTest(AgentKernelCase):
    """An attached Jupyter frontend sees on iopub what RPC callers run, hidden executions aside."""
    kernel_config = {"python": "/usr/bin/python3"}

    def setUp(self):
        super().setUp()
        self.kc = self.jupyter_client()
        # A cell of its own proves the iopub subscription is live before the RPC calls.
        self.assertEqual(self.kc.execute_interactive("jupyter_side = 1", timeout=60)["content"]["status"], "ok")

    def broadcast(self, timeout=30):
        """The iopub messages of the next RPC execution, from its execute_input to its idle."""
        messages, parent = [], None
        deadline = time.monotonic() + timeout
        while True:
            msg = self.kc.get_iopub_msg(timeout=max(0.01, deadline - time.monotonic()))
            if parent is None and msg["msg_type"] == "status" and msg["content"]["execution_state"] == "busy" \
                    and msg["parent_header"].get("msg_type") == "execute_request" \
                    and msg["parent_header"].get("username") == "rpc":
                parent = msg["parent_header"]["msg_id"]
            if parent is None or msg["parent_header"].get("msg_id") != parent:
                continue
            messages.append(msg)
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                return messages

    def test_visible_rpc_execution_is_broadcast(self):
        code = "import sys\nprint('from rpc')\nprint('rpc err', file=sys.stderr)\ndisplay({'x': 1}, raw=True)\n6 * 7"
        result, items = self.execute(code)
        self.assertEqual(result["status"], "ok")
        messages = self.broadcast()
        self.assertEqual([m["msg_type"] for m in messages],
                         ["status", "execute_input", "stream", "stream", "display_data", "execute_result", "status"])
        self.assertEqual(messages[1]["content"], {"code": code, "execution_count": result["execution_count"]})
        self.assertEqual(messages[2]["content"], {"name": "stdout", "text": "from rpc\n"})
        self.assertEqual(messages[3]["content"], {"name": "stderr", "text": "rpc err\n"})
        self.assertEqual(messages[4]["content"]["data"], {"x": 1})
        self.assertEqual(messages[5]["content"]["data"]["text/plain"], "42")
        self.assertEqual(messages[5]["content"]["execution_count"], result["execution_count"])
        self.assertEqual(len({m["header"]["msg_id"] for m in messages}), len(messages), "each message its own header")
        # The RPC caller got the same outputs.
        self.assertEqual([item.get("stream", item.get("kind")) for item in items],
                         ["stdout", "stderr", "display", "execute_result"])

    def test_rpc_error_is_broadcast(self):
        result, _ = self.execute("raise KeyError('rpc missing')")
        self.assertEqual(result["status"], "error")
        errors = [m for m in self.broadcast() if m["msg_type"] == "error"]
        self.assertEqual(len(errors), 1)
        self.assertEqual((errors[0]["content"]["ename"], errors[0]["content"]["evalue"]), ("KeyError", "'rpc missing'"))

    def test_hidden_rpc_execution_is_not_broadcast(self):
        result, items = self.execute("print('secret setup')", hidden=True)
        self.assertEqual(result["status"], "ok")
        self.assertEqual(items, [{"stream": "stdout", "text": "secret setup\n"}])
        self.execute("print('visible')")
        seen = self.broadcast()
        self.assertEqual([m["content"]["text"] for m in seen if m["msg_type"] == "stream"], ["visible\n"])
        # Nothing else arrived: the hidden execution published no message at all.
        time.sleep(0.5)
        while True:
            try:
                msg = self.kc.get_iopub_msg(timeout=0.2)
            except Exception as error:
                if type(error).__name__ == "Empty":
                    break
                raise
            self.assertNotIn("secret", json.dumps(msg["content"]))

    def test_thread_output_after_an_rpc_execution_keeps_its_parent(self):
        self.execute("import threading\nthreading.Timer(0.3, lambda: print('after rpc')).start()")
        parent = self.broadcast()[0]["parent_header"]["msg_id"]
        deadline = time.monotonic() + 30
        while True:
            msg = self.kc.get_iopub_msg(timeout=max(0.01, deadline - time.monotonic()))
            if msg["msg_type"] == "stream":
                break
        self.assertEqual(msg["content"]["text"], "after rpc\n")
        self.assertEqual(msg["parent_header"]["msg_id"], parent)


class IdleWatchdogTest(AgentKernelCase):
    """lifecycle.idle_timeout_seconds counts a running cell and an attached
    frontend (an open kernel.relay) as activity, though no RPC arrives meanwhile."""
    kernel_config = {"python": "/usr/bin/python3"}
    lifecycle_config = {"idle_timeout_seconds": 1}

    def assert_alive(self):
        self.assertIsNone(self.process.poll(), "the idle watchdog shut the agent down")

    def assert_shuts_down_idle(self):
        code = self.process.wait(timeout=10)
        self.assertEqual(code, 0)
        with open(os.path.join(self.dir, "stderr.log"), "rb") as log:
            self.assertIn(b"idle watchdog", log.read())

    def test_a_running_cell_keeps_the_agent_up(self):
        result, items = self.execute("import time; time.sleep(3); print('slept')")
        self.assertEqual(result["status"], "ok")
        self.assertEqual("".join(i.get("text", "") for i in items), "slept\n")
        self.assert_alive()
        self.assert_shuts_down_idle()

    def test_an_attached_frontend_keeps_the_agent_up_until_it_goes(self):
        relay = self.client.stream("kernel.relay")
        self.assertIn("kernel", next(relay).body)  # the hello: the relay is open
        time.sleep(3)  # nothing on the wire in either direction (keepalives come after 5 s)
        self.assert_alive()
        relay.close()
        self.assert_shuts_down_idle()


class PlainModeTest(AgentKernelCase):
    """Without IPython: the same messages from exec/eval."""
    kernel_config = {"python": "/usr/bin/python3", "mode": "plain"}

    def test_plain_mode_semantics(self):
        self.assertEqual(self.execute("1")[0]["status"], "ok")
        self.assertEqual(self.client.call("kernel.info")["executor"]["implementation"], "plain")
        result, items = self.execute("class R:\n    def _repr_html_(self): return '<b>r</b>'\nprint('x')\nR()")
        self.assertEqual(items[0], {"stream": "stdout", "text": "x\n"})
        self.assertEqual(items[1]["kind"], "execute_result")
        self.assertEqual(items[1]["data"]["text/html"], "<b>r</b>")
        result, items = self.execute("def f():\n    return 1 / 0\nf()")
        self.assertEqual(result["ename"], "ZeroDivisionError")
        traceback = "\n".join(result["traceback"])
        self.assertIn("line 2, in f", traceback)
        self.assertIn("return 1 / 0", traceback)
        self.assertNotIn("gpubox-executor", traceback)
        self.assertEqual(self.execute("def broken(:")[0]["ename"], "SyntaxError")
        self.assertEqual(self.execute("display('shown')")[1][0]["data"]["text/plain"], "'shown'")
        self.assertEqual(self.execute("gpubox_plain_name = 1")[0]["status"], "ok")
        completion = self.client.call("kernel.complete", code="x = gpubox_plain_n")
        self.assertEqual(completion["matches"], ["gpubox_plain_name"])
        self.assertEqual(completion["cursor_start"], 4)
        self.assertTrue(self.client.call("kernel.inspect", code="len")["found"])
        result, _ = self.execute("import time; time.sleep(100)", timeout_s=1)
        self.assertEqual(result["ename"], "KeyboardInterrupt")
        self.assertEqual(self.execute("'again'")[1][-1]["data"]["text/plain"], "'again'")
        self.assertEqual(self.execute("_")[1][-1]["data"]["text/plain"], "'again'")


class DisabledKernelTest(AgentKernelCase):
    kernel_config = {"enabled": False}

    def test_disabled(self):
        self.assertEqual(self.client.call("sys.info")["components"]["kernel"], {"state": "disabled"})
        with self.assertRaises(gpubox.RpcError) as caught:
            self.client.call("kernel.execute", code="1")
        self.assertEqual(caught.exception.code, "unavailable")


if __name__ == "__main__":
    unittest.main()
