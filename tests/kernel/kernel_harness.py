"""Starts the real gpubox kernel (build/share/jupyter/kernels/gpubox) with jupyter_client
and runs cells, collecting every iopub message of the cell up to its idle status."""
import os
import sys
import time
import unittest

from jupyter_client.manager import start_new_kernel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from prerequisite import missing, requires  # noqa: E402,F401

KERNEL_NAME = "gpubox"
TIMEOUT = 60


def require_kernelspec():
    if "JUPYTER_PATH" not in os.environ:
        missing("JUPYTER_PATH must name build/share/jupyter (ctest sets it)")


class Cell:
    """The reply and the iopub messages of one execute_request, in arrival order."""

    def __init__(self, reply, messages):
        self.reply = reply
        self.content = reply["content"]
        self.messages = messages

    def of_type(self, msg_type):
        return [m for m in self.messages if m["msg_type"] == msg_type]

    def stream(self, name="stdout"):
        return "".join(m["content"]["text"] for m in self.of_type("stream") if m["content"]["name"] == name)


class KernelTestCase(unittest.TestCase):
    """One kernel per test class; cls.kc is a blocking client."""

    @classmethod
    def setUpClass(cls):
        require_kernelspec()
        cls.km, cls.kc = start_new_kernel(kernel_name=KERNEL_NAME, startup_timeout=TIMEOUT)

    @classmethod
    def tearDownClass(cls):
        cls.kc.stop_channels()
        cls.km.shutdown_kernel(now=True)

    def execute(self, code, timeout=TIMEOUT, stdin_handler=None, **kwargs):
        """Runs code; stdin_handler(input_request) gives the reply's text, or None to leave it unanswered."""
        return run_cell(self.kc, code, timeout, stdin_handler, **kwargs)


def run_cell(kc, code, timeout=TIMEOUT, stdin_handler=None, **kwargs):
    """Runs code through the client kc; the Cell of its reply and iopub messages."""
    msg_id = kc.execute(code, **kwargs)
    messages = []
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError("no idle status within %ss for %r" % (timeout, code))
        if stdin_handler is not None:
            try:
                request = kc.get_stdin_msg(timeout=0.01)
                answer = stdin_handler(request)
                if answer is not None:
                    kc.input(answer)
            except Exception as error:  # queue.Empty
                if type(error).__name__ != "Empty":
                    raise
        try:
            msg = kc.get_iopub_msg(timeout=min(remaining, 0.05 if stdin_handler else remaining))
        except Exception as error:
            if type(error).__name__ == "Empty":
                continue
            raise
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            break
        messages.append(msg)
    while True:  # replies to requests an earlier failure left unread are skipped
        reply = kc.get_shell_msg(timeout=timeout)
        if reply["parent_header"].get("msg_id") == msg_id:
            break
    return Cell(reply, messages)
