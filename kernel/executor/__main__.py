"""The executor's entry: sets the process up, picks a backend, says ready and answers the agent's requests one at a time until it closes the channel."""

import os
import signal
import sys
import threading
import time
import warnings

from . import stdin
from .cells import execute
from .channel import CHANNEL_FD, flush_std, recv, send
from .comms import Comms
from .figures import on_pyplot_import
from .import_watch import AfterImport
from .ipython_backend import make_ipython_backend
from .plain_backend import PlainBackend
from .state import on_sigint, state
from .tracebacks import clean_traceback


def make_backend():
    if os.environ.get("GPUBOX_KERNEL_MODE") != "plain":
        try:
            return make_ipython_backend()
        except ImportError:
            pass
    return PlainBackend()


def _watch_between_cells(parent):
    # The agent (or a standalone kernel) is gone: a cell may be spinning and never
    # read the channel again, so watch the parent instead. (Not PR_SET_PDEATHSIG:
    # it fires when the spawning *thread* exits, which may be any worker thread.)
    # Between cells, text a thread printed without a newline is flushed here, so
    # that it goes out as that cell's late output, not with the next cell's.
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            os._exit(0)
        if not state.running:
            flush_std()


def main():
    os.set_inheritable(CHANNEL_FD, False)
    threading.Thread(target=_watch_between_cells, args=(os.getppid(),), daemon=True, name="between-cells").start()
    os.environ.setdefault("MPLBACKEND", "agg")
    warnings.filterwarnings("ignore", message=".*non-GUI backend.*")
    warnings.filterwarnings("ignore", message=".*is non-interactive, and thus cannot be shown.*")
    signal.signal(signal.SIGINT, on_sigint)
    stdin.install()
    # Line buffering: one write per printed line (the agent coalesces lines further).
    for stream in (sys.stdout, sys.stderr):
        stream.reconfigure(line_buffering=True, write_through=False)
    comms = Comms()
    backend = make_backend()
    AfterImport("matplotlib.pyplot", on_pyplot_import)
    send({"type": "ready", "implementation": backend.name,
          "python_version": "%d.%d.%d" % sys.version_info[:3], "pid": os.getpid()})
    handlers = {
        "execute": lambda r: execute(backend, r),
        "complete": lambda r: dict(backend.complete(r["code"], int(r["cursor_pos"])), type="reply"),
        "inspect": lambda r: dict(backend.inspect(r["code"], int(r["cursor_pos"]), int(r.get("detail_level", 0))), type="reply"),
        "is_complete": lambda r: dict(backend.is_complete(r["code"]), type="reply"),
        "comm": comms.handle,
        "comm_info": comms.info,
    }
    while True:
        request = recv()
        handler = handlers.get(request.get("type"))
        try:
            reply = handler(request) if handler else {"type": "reply", "status": "error",
                                                       "ename": "ValueError", "evalue": "unknown request"}
        except KeyboardInterrupt:  # an interrupt that came as a request ended: dropped
            state.running = False
            reply = {"type": "done" if request.get("type") == "execute" else "reply", "status": "error",
                     "ename": "KeyboardInterrupt", "evalue": "", "traceback": ["KeyboardInterrupt"]}
        except Exception as error:
            reply = {"type": "reply", "status": "error", "ename": type(error).__name__, "evalue": str(error),
                     "traceback": clean_traceback(type(error), error, error.__traceback__)}
        send(reply)
