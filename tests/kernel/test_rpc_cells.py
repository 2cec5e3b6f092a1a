"""Cells over RPC behave as Jupyter cells do (the agent not as PID 1, its kernel
reached through the Python client): kernel.interrupt then the next cell at once
(150 rounds), one execution count shared with Jupyter clients and reset by a
restart, In/Out and tracebacks that match it, every MIME type of a display,
exit's payload, a plain call() that returns what a cell streamed, a stream-only
method refused as a plain call, and a kernel HOME that is not the work dir.
Run by ctest with Debian's /usr/bin/python3."""
import os
import shutil
import tempfile
import time
import unittest

import interrupt_rounds
from interrupt_rounds import plain_text
from test_agent_kernel import AgentKernelCase


class RpcInterruptRoundsTest(AgentKernelCase):
    kernel_config = {"python": "/usr/bin/python3"}

    def test_interrupt_then_execute_rounds(self):
        self.execute("None")  # the executor has started: an interrupt finds the cell
        for number, name, code, delay in interrupt_rounds.rounds(150, seed=7):
            context = "round %d (%s, interrupt after %s s)" % (number, name, delay)
            with self.client.stream("kernel.execute", code=code) as first:
                if delay is not None:
                    time.sleep(delay)
                    self.client.call("kernel.interrupt")
                for _ in first:
                    pass
                result = first.result
            if delay is None:
                self.assertEqual(self.client.call("kernel.interrupt"), {"interrupted": False}, context)
            self.assertIn(result["status"], ("ok", "error"), context)
            if result["status"] == "error":
                self.assertEqual(result.get("ename"), "KeyboardInterrupt", context)
            next_result, items = self.execute("%d + 1" % number)
            self.assertEqual(next_result["status"], "ok", "%s: %s" % (context, next_result))
            results = [i for i in items if i.get("kind") == "execute_result"]
            self.assertEqual([r["data"]["text/plain"] for r in results], [str(number + 1)], context)


class RpcCountsTest(AgentKernelCase):
    kernel_config = {"python": "/usr/bin/python3"}

    def count_of(self, code):
        result, _ = self.execute(code)
        return result["execution_count"]

    def test_one_count_for_rpc_and_jupyter_cells(self):
        self.assertEqual([self.count_of("1"), self.count_of("2")], [1, 2])
        kc = self.jupyter_client()
        msg_id = kc.execute("'from jupyter'")
        reply = interrupt_rounds.wait_for_reply(kc, msg_id, 30)
        messages = interrupt_rounds.iopub_of(kc, [msg_id], 30)[msg_id]
        self.assertEqual(reply["content"]["execution_count"], 3)
        self.assertEqual([m["content"]["execution_count"] for m in messages if m["msg_type"] == "execute_input"], [3])
        self.assertEqual([m["content"]["execution_count"] for m in messages if m["msg_type"] == "execute_result"], [3])
        self.assertEqual(self.count_of("4"), 4)
        result, items = self.execute("Out[1], In[3], _4")
        self.assertEqual([i["data"]["text/plain"] for i in items if i.get("kind") == "execute_result"],
                         ["(1, \"'from jupyter'\", 4)"])
        failed, _ = self.execute("1/0")
        self.assertEqual(failed["execution_count"], 6)
        self.assertRegex(plain_text(failed["traceback"]), r"Cell In ?\[6\]")

    def test_a_restart_starts_counting_again(self):
        self.count_of("1")
        self.count_of("2")
        self.client.call("kernel.restart")
        self.assertEqual(self.count_of("'fresh'"), 1)
        kc = self.jupyter_client()
        msg_id = kc.execute("'jupyter'")
        self.assertEqual(interrupt_rounds.wait_for_reply(kc, msg_id, 30)["content"]["execution_count"], 2)

    def test_hidden_cells_take_no_count(self):
        first = self.count_of("1")
        self.execute("hidden = 1", hidden=True)
        self.assertEqual(self.count_of("2"), first + 1)


class RpcOutputsTest(AgentKernelCase):
    kernel_config = {"python": "/usr/bin/python3"}

    def test_every_mime_type_of_a_display_comes_back(self):
        result, items = self.execute("from IPython.display import HTML, Markdown\n"
                                     "display(HTML('<b>x</b>'))\nMarkdown('*m*')")
        displays = [i for i in items if i.get("kind") in ("display", "execute_result")]
        self.assertEqual(displays[0]["data"]["text/html"], "<b>x</b>")
        self.assertIn("text/plain", displays[0]["data"])
        self.assertEqual(displays[1]["data"]["text/markdown"], "*m*")

    def test_plt_show_output_comes_where_it_is_called(self):
        from test_first_minutes import PLOT_CELL
        result, items = self.execute(PLOT_CELL)
        self.assertEqual(result["status"], "ok", result)
        sequence = [i["text"] if "stream" in i else ("image" if "image/png" in i["data"] else i["data"]["text/plain"])
                    for i in items]
        self.assertEqual(sequence, ["A\n", "image", "B\n", "image", "image", "image", "'D'"])

    def test_a_plain_call_returns_what_the_cell_streamed(self):
        result = self.client.call("kernel.execute", code="print('x'); 6*7")
        self.assertEqual(result["status"], "ok")
        self.assertEqual(result["outputs"][0], {"stream": "stdout", "text": "x\n"})
        self.assertEqual(result["outputs"][1]["kind"], "execute_result")
        self.assertEqual(result["outputs"][1]["data"]["text/plain"], "42")

    def test_a_stream_only_method_is_refused_as_a_plain_call_and_nothing_runs(self):
        marker = os.path.join(self.dir, "spawned")
        with self.assertRaises(ValueError) as raised:
            self.client.call("proc.spawn", argv=["touch", marker])
        self.assertIn("client.stream('proc.spawn'", str(raised.exception))
        self.assertIn("proc.exec", str(raised.exception))
        self.assertFalse(os.path.exists(marker))

    def test_exit_sends_the_ask_exit_payload(self):
        result, _ = self.execute("exit")
        self.assertEqual(result["payload"], [{"source": "ask_exit", "keepkernel": False}])

    def test_an_interrupted_cell_shows_user_frames_only(self):
        self.execute("None")
        with self.client.stream("kernel.execute", code="import time\ntime.sleep(30)") as stream:
            time.sleep(0.5)
            self.client.call("kernel.interrupt")
            for _ in stream:
                pass
            result = stream.result
        text = plain_text(result["traceback"])
        self.assertIn("time.sleep(30)", text)
        self.assertNotIn("gpubox-executor", text)


class KernelHomeTest(AgentKernelCase):
    """The agent runs in a work dir that is also HOME (as the local backend sets it up)."""
    kernel_config = {"python": "/usr/bin/python3"}

    def setUp(self):
        self.work = os.path.realpath(tempfile.mkdtemp(prefix="gpubox-work-"))
        self.addCleanup(shutil.rmtree, self.work, True)
        self.saved = os.getcwd(), os.environ.get("HOME")
        os.chdir(self.work)
        os.environ["HOME"] = self.work
        try:
            super().setUp()
        finally:
            os.chdir(self.saved[0])
            if self.saved[1] is None:
                del os.environ["HOME"]
            else:
                os.environ["HOME"] = self.saved[1]

    def test_ipython_and_matplotlib_write_nothing_into_the_work_dir(self):
        result, items = self.execute("import os, IPython, matplotlib.pyplot as plt\nplt.plot([1]); plt.show()\n"
                                     "print(os.path.expanduser('~'), os.getcwd())")
        self.assertEqual(result["status"], "ok", result)
        home, cwd = "".join(i.get("text", "") for i in items if i.get("stream") == "stdout").split()
        self.assertEqual(cwd, self.work)
        self.assertEqual(home, os.path.join(self.dir, "kernel-home"))
        self.assertEqual(sorted(os.listdir(self.work)), [], "no .ipython, .cache or .config in the work dir")


if __name__ == "__main__":
    unittest.main()
