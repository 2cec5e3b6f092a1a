"""input() and getpass() in user code: input_request frames answered by the frontend through the agent; sys.stdin itself is /dev/null."""

import builtins
import os
import sys

from .channel import send
from .state import state


class StdinNotImplementedError(RuntimeError):
    __module__ = "gpubox_executor"  # the name tracebacks give it, as when the executor was one file


def _input_request(prompt="", password=False):
    if not state.allow_stdin:
        raise StdinNotImplementedError(
            "input() is not available: this execute_request did not allow stdin "
            "(allow_stdin is false; the frontend does not support input requests)")
    if not state.running:
        raise StdinNotImplementedError("input() is not available between cells (no request is running to answer it)")
    reply = send({"type": "input_request", "prompt": str(prompt), "password": bool(password)}, wait_ack=True)
    if reply.get("interrupted"):
        state.interrupt_pending = False
        raise KeyboardInterrupt
    if "error" in reply:
        raise StdinNotImplementedError(reply["error"])
    return reply.get("value", "")


def _input(prompt=""):
    return _input_request(prompt, False)


def _getpass(prompt="Password: ", stream=None):
    return _input_request(prompt, True)


def install():
    """Replaces input(), getpass.getpass() and sys.stdin for user code."""
    builtins.input = _input
    import getpass
    getpass.getpass = _getpass
    sys.stdin = open(os.devnull)
