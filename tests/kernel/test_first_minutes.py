"""What a notebook user meets in the first minutes, through the standalone kernel
driven by jupyter_client, each checked against what ipykernel does:
- a cell sent the moment an interrupted cell's reply arrives runs (300 rounds,
  interrupt_request and SIGINT, the interrupt landing at every moment of a cell);
- stop_on_error aborts only the cells queued before the failed cell's reply, each
  answered "aborted" with busy and idle, as ipykernel does;
- plt.show() shows each figure where it is called, in ipykernel's order (ipykernel
  itself runs the same cell here as the reference);
- exit and quit() send ipykernel's ask_exit payload;
- execution counts and In/Out advance together; tracebacks hold user frames only.
Run by ctest with Debian's /usr/bin/python3 (jupyter_client, ipykernel, matplotlib)."""
import os
import signal
import time
import unittest

from jupyter_client.manager import start_new_kernel

import interrupt_rounds
from interrupt_rounds import plain_text
from kernel_harness import TIMEOUT, KernelTestCase, require_kernelspec, run_cell

PLOT_CELL = ("import matplotlib.pyplot as plt\n"
             "print('A')\nplt.plot([1, 2]); plt.show()\nprint('B')\n"
             "plt.figure(); plt.plot([2, 1]); plt.show()\n"
             "for k in range(2):\n    plt.figure(); plt.plot([k, 0]); plt.show()\n"
             "'D'")


def output_sequence(cell):
    """What a notebook shows of a cell, in order: stream text (consecutive chunks of one
    stream joined), 'image' for a display with image/png, and results' text/plain."""
    sequence = []
    for msg in cell.messages:
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream":
            if sequence and sequence[-1][0] == content["name"]:
                sequence[-1] = (content["name"], sequence[-1][1] + content["text"])
            else:
                sequence.append((content["name"], content["text"]))
        elif kind == "display_data":
            sequence.append(("display", "image" if "image/png" in content["data"] else content["data"].get("text/plain")))
        elif kind == "execute_result":
            sequence.append(("result", content["data"]["text/plain"]))
    return sequence


class InterruptThenExecuteTest(KernelTestCase):
    """A frontend that sends the next cell as soon as an interrupted one's reply arrives."""

    def test_interrupt_request_rounds(self):
        interrupt_rounds.run_jupyter_rounds(self, self.kc, self.km.interrupt_kernel, count=150, seed=12)

    def test_sigint_rounds(self):
        pid = self.km.provisioner.process.pid
        interrupt_rounds.run_jupyter_rounds(self, self.kc, lambda: os.kill(pid, signal.SIGINT), count=150, seed=21,
                                            settle=0.05)


# IPython sets its history Event as each cell begins; a lock that stays held a moment once taken
# widens to 0.5 s the instant where a KeyboardInterrupt would leave that Event's lock held.
SLOW_HISTORY_LOCK = """import threading, time
class _SlowLock:
    def __init__(self):
        self._lock = threading.Lock()
    def acquire(self, *args):
        return self._lock.acquire(*args)
    def release(self):
        self._lock.release()
    def __enter__(self):
        self._lock.acquire()
        time.sleep(0.5)
        return True
    def __exit__(self, *exc):
        self._lock.release()
get_ipython().history_manager.save_flag = threading.Event()
get_ipython().history_manager.save_flag._cond = threading.Condition(_SlowLock())
_x = "before"
"""


class InterruptInBookkeepingTest(KernelTestCase):
    """An interrupt that lands in IPython's own code around a cell's (the rare CI hang of the rounds
    above: a SIGINT at the very end of a quick cell left a lock of IPython's held, and the next cell
    waited on it forever): the cell is interrupted, and the next one runs."""

    def test_the_next_cell_runs(self):
        pid = self.km.provisioner.process.pid
        self.assertEqual(self.execute(SLOW_HISTORY_LOCK).content["status"], "ok")
        for number, interrupt in enumerate([lambda: os.kill(pid, signal.SIGINT), self.km.interrupt_kernel]):
            first = self.kc.execute("_x = %d" % number)
            interrupt_rounds.wait_for_busy(self.kc, first, TIMEOUT)
            time.sleep(0.1)  # inside the 0.5 s IPython's history Event takes
            interrupt()
            reply = interrupt_rounds.wait_for_reply(self.kc, first, 10)
            self.assertEqual(reply["content"]["ename"], "KeyboardInterrupt")
            after = self.execute("_x", timeout=10)  # waited forever for IPython's lock
            self.assertEqual(after.of_type("execute_result")[0]["content"]["data"]["text/plain"], "'before'",
                             "the interrupted cell's code never ran")
            text = plain_text(reply["content"]["traceback"])  # raised as the cell's code began: no frame of ours or IPython's
            self.assertNotIn("gpubox-executor", text)
            self.assertNotIn("IPython", text)


class StopOnErrorTest(KernelTestCase):
    def test_only_cells_queued_before_the_error_are_aborted(self):
        kc = self.kc
        failing = kc.execute("import time; time.sleep(0.5); 1/0")
        queued = kc.execute("queued_ran = True")  # sent while the failing cell runs
        failed = interrupt_rounds.wait_for_reply(kc, failing, TIMEOUT)
        after = kc.execute("'after'")  # sent once the error is known
        aborted = interrupt_rounds.wait_for_reply(kc, queued, TIMEOUT)
        ran = interrupt_rounds.wait_for_reply(kc, after, TIMEOUT)
        self.assertEqual(failed["content"]["ename"], "ZeroDivisionError")
        self.assertEqual(aborted["content"], {"status": "aborted"})
        self.assertEqual(ran["content"]["status"], "ok")
        messages = interrupt_rounds.iopub_of(kc, [failing, queued, after], TIMEOUT)
        states = [m["content"]["execution_state"] for m in messages[queued] if m["msg_type"] == "status"]
        self.assertEqual(states, ["busy", "idle"], "an aborted cell still has busy and idle, as in ipykernel")
        self.assertEqual(self.execute("'queued_ran' in dir()").of_type("execute_result")[0]["content"]["data"]["text/plain"],
                         "False")

    def test_without_stop_on_error_queued_cells_run(self):
        kc = self.kc
        failing = kc.execute("import time; time.sleep(0.3); 1/0", stop_on_error=False)
        queued = kc.execute("'queued'")
        interrupt_rounds.wait_for_reply(kc, failing, TIMEOUT)
        self.assertEqual(interrupt_rounds.wait_for_reply(kc, queued, TIMEOUT)["content"]["status"], "ok")
        interrupt_rounds.iopub_of(kc, [failing, queued], TIMEOUT)


class PlotOrderTest(KernelTestCase):
    def test_show_displays_each_figure_where_it_is_called_as_ipykernel_does(self):
        ours = output_sequence(self.execute(PLOT_CELL))
        km, kc = start_new_kernel(kernel_name="python3", startup_timeout=TIMEOUT,  # ipykernel, the reference
                                  env=dict(os.environ, PYDEVD_DISABLE_FILE_VALIDATION="1"))
        try:
            theirs = output_sequence(run_cell(kc, PLOT_CELL))
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=True)
        self.assertEqual(theirs, [("stdout", "A\n"), ("display", "image"), ("stdout", "B\n"), ("display", "image"),
                                  ("display", "image"), ("display", "image"), ("result", "'D'")])
        self.assertEqual(ours, theirs)

    def test_display_of_a_figure_is_an_image(self):
        cell = self.execute("import matplotlib.pyplot as plt\nfig = plt.figure(); plt.plot([1, 3])\ndisplay(fig)\nplt.close(fig)")
        self.assertEqual(output_sequence(cell), [("display", "image")])

    def test_a_figure_left_open_is_shown_at_the_end_of_the_cell(self):
        cell = self.execute("import matplotlib.pyplot as plt\nplt.plot([1, 2])\nprint('after')")
        self.assertEqual(output_sequence(cell), [("stdout", "after\n"), ("display", "image")])


class ExitTest(KernelTestCase):
    def test_exit_and_quit_ask_the_frontend_to_leave(self):
        for code in ("exit", "quit()", "exit()"):
            cell = self.execute(code)
            self.assertEqual(cell.content["status"], "ok", code)
            self.assertEqual(cell.content["payload"], [{"source": "ask_exit", "keepkernel": False}], code)
            self.assertEqual(cell.of_type("error"), [], code)
        self.assertEqual(self.execute("40 + 2").content["payload"], [], "the payload belongs to that cell only")


class CountsAndTracebacksTest(KernelTestCase):
    def test_counts_in_and_out_advance_together(self):
        first = self.execute("6 * 7")
        count = first.content["execution_count"]
        self.assertEqual(first.of_type("execute_input")[0]["content"]["execution_count"], count)
        self.assertEqual(first.of_type("execute_result")[0]["content"]["execution_count"], count)
        second = self.execute("Out[%d], In[%d], _%d" % (count, count, count))
        self.assertEqual(second.content["execution_count"], count + 1)
        self.assertEqual(second.of_type("execute_result")[0]["content"]["data"]["text/plain"], "(42, '6 * 7', 42)")
        failing = self.execute("1/0")
        self.assertRegex(plain_text(failing.content["traceback"]), r"Cell In ?\[%d\]" % (count + 2))

    def assert_user_frames_only(self, traceback, user_line):
        text = plain_text(traceback)
        self.assertNotIn("gpubox-executor", text)
        self.assertNotIn("_on_sigint", text)
        self.assertIn(user_line, text)

    def test_an_interrupted_sleep_shows_the_users_line(self):
        msg_id = self.kc.execute("import time\ntime.sleep(30)")
        time.sleep(0.5)
        self.km.interrupt_kernel()
        reply = interrupt_rounds.wait_for_reply(self.kc, msg_id, TIMEOUT)
        interrupt_rounds.iopub_of(self.kc, [msg_id], TIMEOUT)
        self.assertEqual(reply["content"]["ename"], "KeyboardInterrupt")
        self.assert_user_frames_only(reply["content"]["traceback"], "time.sleep(30)")

    def test_an_interrupted_input_shows_the_users_line(self):
        def interrupt_instead_of_answering(request):
            self.km.interrupt_kernel()
            return None
        cell = self.execute("name = input('who? ')", allow_stdin=True, stdin_handler=interrupt_instead_of_answering)
        self.assertEqual(cell.content["ename"], "KeyboardInterrupt")
        self.assert_user_frames_only(cell.content["traceback"], "name = input('who? ')")


if __name__ == "__main__":
    require_kernelspec()
    unittest.main()
