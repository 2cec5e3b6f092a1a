"""Jupyter comms (the protocol behind ipywidgets) against the real gpubox kernel with
jupyter_client: comm_open, comm_msg and comm_close both ways, with binary buffers,
served by the `comm` package in the Python executor; comm_info_request. Standalone
(the kernelspec, IPython and plain mode) and inside the agent (with RPC executions)."""
import os
import time
import unittest
import uuid

from kernel_harness import TIMEOUT, KernelTestCase, requires
from test_agent_kernel import AgentKernelCase

try:
    import comm  # noqa: F401  (the kernel's executor runs the same /usr/bin/python3)
    HAVE_COMM = True
except ImportError:
    HAVE_COMM = False

# An "echo" target: records what reaches it, answers each comm_msg with its data and
# its buffers reversed, raises on {"boom": true}, and records comm_close.
REGISTER_ECHO = '''
import comm
received = []
def on_open(c, msg):
    received.append(("open", c.comm_id, msg["content"]["data"], [bytes(b) for b in msg["buffers"]]))
    def on_msg(msg):
        data = msg["content"]["data"]
        received.append(("msg", c.comm_id, data, [bytes(b) for b in msg["buffers"]]))
        if data.get("boom"):
            raise ValueError("the handler exploded")
        print("handled", data.get("n"))
        c.send({"echo": data, "sizes": [len(b) for b in msg["buffers"]]},
               buffers=[bytes(reversed(bytes(b))) for b in msg["buffers"]])
    c.on_msg(on_msg)
    c.on_close(lambda msg: received.append(("close", c.comm_id, msg["content"]["data"])))
    c.send({"hello": "from the kernel"})
comm.get_comm_manager().register_target("echo", on_open)
def refuse(c, msg):
    raise RuntimeError("refused")
comm.get_comm_manager().register_target("refusing", refuse)
'''


class CommClient:
    """Comm requests through self.kc, a jupyter_client BlockingKernelClient."""

    def send_shell(self, msg_type, content, buffers=None):
        msg = self.kc.session.msg(msg_type, content)
        if buffers:
            msg["buffers"] = buffers
        self.kc.shell_channel.send(msg)
        return msg["header"]["msg_id"]

    def until_idle(self, msg_id):
        """Every iopub message parented to msg_id, busy and idle status included, in order."""
        messages = []
        deadline = time.monotonic() + TIMEOUT
        while True:
            self.assertGreater(deadline - time.monotonic(), 0, "no idle status for %s" % msg_id)
            msg = self.kc.get_iopub_msg(timeout=deadline - time.monotonic())
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            messages.append(msg)
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                return messages

    def comm(self, msg_type, content, buffers=None):
        """Sends a comm message; what the kernel published for it, between busy and idle."""
        messages = self.until_idle(self.send_shell(msg_type, content, buffers))
        self.assertEqual(messages[0]["msg_type"], "status")
        self.assertEqual(messages[0]["content"]["execution_state"], "busy")
        return messages[1:-1]

    def comm_info(self, target_name=None):
        msg_id = self.kc.comm_info(target_name) if target_name else self.kc.comm_info()
        reply = self.kc.get_shell_msg(timeout=TIMEOUT)
        self.assertEqual(reply["parent_header"]["msg_id"], msg_id)
        self.assertEqual(reply["msg_type"], "comm_info_reply")
        self.assertEqual(reply["content"]["status"], "ok")
        return reply["content"]["comms"]

    def value(self, expression):
        cell = self.execute(expression)
        self.assertEqual(cell.content["status"], "ok", cell.content)
        return cell.of_type("execute_result")[0]["content"]["data"]["text/plain"]

    def open_echo(self, data=None, buffers=None):
        comm_id = uuid.uuid4().hex
        out = self.comm("comm_open", {"comm_id": comm_id, "target_name": "echo", "data": data or {}}, buffers)
        self.assertEqual([m["msg_type"] for m in out], ["comm_msg"])
        self.assertEqual(out[0]["content"]["comm_id"], comm_id)
        self.assertEqual(out[0]["content"]["data"], {"hello": "from the kernel"})
        return comm_id


@requires(HAVE_COMM, "python3-comm is not installed (scripts/setup.sh installs it)")
class CommTest(CommClient, KernelTestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        reply = cls.kc.execute_interactive(REGISTER_ECHO, timeout=TIMEOUT)
        assert reply["content"]["status"] == "ok", reply["content"]

    def received(self):
        """What the echo target recorded, as the repr of the list."""
        cell = self.execute("print(repr(received))")
        self.assertEqual(cell.content["status"], "ok", cell.content)
        return cell.stream()

    def test_frontend_opens_and_messages_a_kernel_target_with_buffers(self):
        comm_id = self.open_echo({"x": 1}, [b"\x00\x01open"])
        self.assertIn(repr(("open", comm_id, {"x": 1}, [b"\x00\x01open"])), self.received())

        out = self.comm("comm_msg", {"comm_id": comm_id, "data": {"n": 7}}, [b"\x00\xffxyz", b"12"])
        streams = [m for m in out if m["msg_type"] == "stream"]
        self.assertEqual("".join(m["content"]["text"] for m in streams), "handled 7\n")
        replies = [m for m in out if m["msg_type"] == "comm_msg"]
        self.assertEqual(len(replies), 1)
        self.assertEqual(replies[0]["content"]["comm_id"], comm_id)
        self.assertEqual(replies[0]["content"]["data"], {"echo": {"n": 7}, "sizes": [5, 2]})
        self.assertEqual([bytes(b) for b in replies[0]["buffers"]], [b"zyx\xff\x00", b"21"])
        self.assertIn(repr(("msg", comm_id, {"n": 7}, [b"\x00\xffxyz", b"12"])), self.received())

    def test_comm_info_lists_open_comms_and_filters_by_target(self):
        comm_id = self.open_echo()
        self.assertEqual(self.comm_info()[comm_id], {"target_name": "echo"})
        self.assertEqual(self.comm_info("echo")[comm_id], {"target_name": "echo"})
        self.assertTrue(all(c["target_name"] == "echo" for c in self.comm_info("echo").values()))
        self.assertNotIn(comm_id, self.comm_info("some.other.target"))

    def test_frontend_closes_a_comm(self):
        comm_id = self.open_echo()
        out = self.comm("comm_close", {"comm_id": comm_id, "data": {"why": "done"}})
        self.assertEqual([m["msg_type"] for m in out], [])
        self.assertIn(repr(("close", comm_id, {"why": "done"})), self.received())
        self.assertNotIn(comm_id, self.comm_info())
        # A message for the closed comm reaches nobody and breaks nothing.
        self.assertEqual(self.comm("comm_msg", {"comm_id": comm_id, "data": {"n": 1}}), [])
        self.assertEqual(self.value("1 + 1"), "2")

    def test_unknown_target_gets_comm_close(self):
        comm_id = uuid.uuid4().hex
        out = self.comm("comm_open", {"comm_id": comm_id, "target_name": "no.such.target", "data": {}})
        self.assertEqual([m["msg_type"] for m in out], ["comm_close"])
        self.assertEqual(out[0]["content"]["comm_id"], comm_id)
        self.assertNotIn(comm_id, self.comm_info())

    def test_target_that_raises_on_open_closes_the_comm_and_says_why(self):
        comm_id = uuid.uuid4().hex
        out = self.comm("comm_open", {"comm_id": comm_id, "target_name": "refusing", "data": {}})
        self.assertEqual([m["msg_type"] for m in out if m["msg_type"] != "stream"], ["comm_close"])
        stderr = "".join(m["content"]["text"] for m in out if m["msg_type"] == "stream")
        self.assertIn("RuntimeError: refused", stderr)
        self.assertNotIn(comm_id, self.comm_info())

    def test_malformed_comm_open_is_reported_and_changes_nothing(self):
        before = self.comm_info()
        out = self.comm("comm_open", {"target_name": "echo", "data": {}})  # no comm_id
        self.assertEqual([m["msg_type"] for m in out], ["stream"])
        self.assertEqual(out[0]["content"]["name"], "stderr")
        self.assertIn("comm_open failed: KeyError: 'comm_id'", out[0]["content"]["text"])
        self.assertEqual(self.comm_info(), before)
        self.assertEqual(self.value("2 + 2"), "4")

    def test_handler_that_raises_does_not_break_the_kernel(self):
        comm_id = self.open_echo()
        out = self.comm("comm_msg", {"comm_id": comm_id, "data": {"boom": True}})
        stderr = "".join(m["content"]["text"] for m in out if m["msg_type"] == "stream" and m["content"]["name"] == "stderr")
        self.assertIn("ValueError: the handler exploded", stderr)
        self.assertNotIn("gpubox-executor", stderr)
        self.assertEqual([m["msg_type"] for m in out if m["msg_type"] != "stream"], [])
        # The comm and the kernel both still work.
        out = self.comm("comm_msg", {"comm_id": comm_id, "data": {"n": 2}})
        self.assertEqual([m["content"]["data"]["echo"] for m in out if m["msg_type"] == "comm_msg"], [{"n": 2}])
        self.assertEqual(self.value("6 * 7"), "42")

    def test_kernel_opens_sends_and_closes_a_comm_from_a_cell(self):
        cell = self.execute('kc = comm.create_comm(target_name="kernel.side", data={"v": 1}, buffers=[b"\\x01\\x02"])\n'
                            'kc.send({"step": 2})\n'
                            'kc.comm_id')
        self.assertEqual(cell.content["status"], "ok", cell.content)
        opened = cell.of_type("comm_open")
        self.assertEqual(len(opened), 1)
        comm_id = opened[0]["content"]["comm_id"]
        self.assertEqual(cell.of_type("execute_result")[0]["content"]["data"]["text/plain"], repr(comm_id))
        self.assertEqual(opened[0]["content"]["target_name"], "kernel.side")
        self.assertEqual(opened[0]["content"]["data"], {"v": 1})
        self.assertEqual([bytes(b) for b in opened[0]["buffers"]], [b"\x01\x02"])
        sent = cell.of_type("comm_msg")
        self.assertEqual([(m["content"]["comm_id"], m["content"]["data"]) for m in sent], [(comm_id, {"step": 2})])
        # In order: the open before the message, both before the result.
        kinds = [m["msg_type"] for m in cell.messages if m["msg_type"] in ("comm_open", "comm_msg", "execute_result")]
        self.assertEqual(kinds, ["comm_open", "comm_msg", "execute_result"])
        self.assertEqual(self.comm_info("kernel.side"), {comm_id: {"target_name": "kernel.side"}})

        # The frontend's messages reach the kernel-side comm's on_msg.
        self.execute("got = []\nkc.on_msg(lambda msg: got.append(msg['content']['data']))")
        self.comm("comm_msg", {"comm_id": comm_id, "data": {"from": "frontend"}})
        self.assertEqual(self.value("got"), "[{'from': 'frontend'}]")

        cell = self.execute('kc.close({"bye": 1})')
        closed = cell.of_type("comm_close")
        self.assertEqual([(m["content"]["comm_id"], m["content"]["data"]) for m in closed], [(comm_id, {"bye": 1})])
        self.assertEqual(self.comm_info("kernel.side"), {})

    def test_a_thread_sends_on_a_comm_after_its_cell_ended(self):
        """As a widget updated from a background thread: the message goes out
        between cells, under the parent of the cell that started the thread."""
        cell = self.execute('import threading\n'
                            'tc = comm.create_comm(target_name="thread.side")\n'
                            'threading.Timer(0.3, lambda: tc.send({"late": True}, buffers=[b"xy"])).start()')
        self.assertEqual(cell.content["status"], "ok", cell.content)
        comm_id = cell.of_type("comm_open")[0]["content"]["comm_id"]
        deadline = time.monotonic() + TIMEOUT
        while True:
            self.assertGreater(deadline - time.monotonic(), 0, "the thread's comm_msg never came")
            msg = self.kc.get_iopub_msg(timeout=deadline - time.monotonic())
            if msg["msg_type"] == "comm_msg":
                break
        self.assertEqual(msg["content"], {"comm_id": comm_id, "data": {"late": True}})
        self.assertEqual([bytes(b) for b in msg["buffers"]], [b"xy"])
        self.assertEqual(msg["parent_header"]["msg_id"], cell.reply["parent_header"]["msg_id"])

    def test_a_silent_cell_still_publishes_its_comm_messages(self):
        cell = self.execute('comm.create_comm(target_name="silent.side").close()', silent=True)
        self.assertEqual([m["msg_type"] for m in cell.messages if m["msg_type"].startswith("comm_")],
                         ["comm_open", "comm_close"])

    def test_zz_comms_survive_nothing_across_an_executor_restart(self):
        comm_id = self.open_echo()
        self.assertIn(comm_id, self.comm_info())
        cell = self.execute("import os; os._exit(1)")
        self.assertEqual(cell.content["status"], "error")
        self.assertEqual(self.comm_info(), {})
        # The old comm is gone with its target: a message for it is dropped, a new open is refused.
        self.assertEqual(self.comm("comm_msg", {"comm_id": comm_id, "data": {"n": 3}}), [])
        out = self.comm("comm_open", {"comm_id": uuid.uuid4().hex, "target_name": "echo", "data": {}})
        self.assertEqual([m["msg_type"] for m in out], ["comm_close"])
        self.assertEqual(self.value("1 + 2"), "3")


class PlainModeCommTest(CommTest):
    """The same through the executor's plain mode (no IPython)."""

    @classmethod
    def setUpClass(cls):
        os.environ["GPUBOX_KERNEL_MODE"] = "plain"
        try:
            super().setUpClass()
        finally:
            del os.environ["GPUBOX_KERNEL_MODE"]

    def test_runs_in_plain_mode(self):
        msg_id = self.kc.kernel_info()
        reply = self.kc.get_shell_msg(timeout=TIMEOUT)
        self.assertEqual(reply["parent_header"]["msg_id"], msg_id)
        self.assertIn("plain mode", reply["content"]["banner"])


@requires(HAVE_COMM, "python3-comm is not installed (scripts/setup.sh installs it)")
class AgentCommTest(CommClient, AgentKernelCase):
    """The kernel inside the agent: a Jupyter frontend's comms, and an RPC execution's."""
    kernel_config = {"python": "/usr/bin/python3"}

    def setUp(self):
        super().setUp()
        self.kc = self.jupyter_client()
        self.assertEqual(self.kc.execute_interactive(REGISTER_ECHO, timeout=TIMEOUT)["content"]["status"], "ok")

    def test_frontend_comm_round_trip_and_rpc_comm_broadcast(self):
        comm_id = self.open_echo()
        out = self.comm("comm_msg", {"comm_id": comm_id, "data": {"n": 5}}, [b"ab"])
        replies = [m for m in out if m["msg_type"] == "comm_msg"]
        self.assertEqual([(m["content"]["data"]["echo"], [bytes(b) for b in m["buffers"]]) for m in replies],
                         [({"n": 5}, [b"ba"])])
        self.assertEqual(self.comm_info(), {comm_id: {"target_name": "echo"}})
        # A comm an RPC execution opens reaches the frontend under that execution; the RPC caller gets no comm item.
        result, items = self.execute('comm.create_comm(target_name="from.rpc", data={"r": 1})\nprint("rpc done")')
        self.assertEqual(result["status"], "ok")
        self.assertEqual(items, [{"stream": "stdout", "text": "rpc done\n"}])
        while True:
            msg = self.kc.get_iopub_msg(timeout=TIMEOUT)
            if msg["msg_type"] == "comm_open":
                break
        self.assertEqual((msg["content"]["target_name"], msg["content"]["data"]), ("from.rpc", {"r": 1}))
        self.assertEqual(msg["parent_header"].get("username"), "rpc")
        self.assertEqual([c["target_name"] for c in self.comm_info("from.rpc").values()], ["from.rpc"])


if __name__ == "__main__":
    unittest.main()
