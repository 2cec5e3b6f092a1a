"""Jupyter comms (ipywidgets): ours in place of the `comm` package's once user code imports it; comm frames out, the frontend's comm messages in."""

import base64
import sys

from .channel import emit, flush_std
from .import_watch import AfterImport
from .state import run_user_code, state
from .tracebacks import clean_traceback


class Comms:
    """Jupyter comms (ipywidgets) through the `comm` package: when user code
    imports it, comm.create_comm and comm.get_comm_manager are replaced by ours.
    A comm's messages go to the agent as "comm" frames, in order with output
    (buffers base64); the frontend's comm_open, comm_msg and comm_close reach
    the manager as "comm" requests. Without `comm` importable nothing changes."""

    def __init__(self):
        self.manager = None  # set once `comm` is imported
        AfterImport("comm", self._install)

    def _install(self, comm_module):
        from comm.base_comm import BaseComm, CommManager

        class Comm(BaseComm):
            def publish_msg(self, msg_type, data=None, metadata=None, buffers=None, **keys):
                content = dict(data={} if data is None else data, comm_id=self.comm_id, **keys)
                emit({"type": "comm", "msg_type": msg_type, "content": content, "metadata": metadata or {},
                      "buffers": [base64.b64encode(memoryview(b).tobytes()).decode("ascii") for b in buffers or []]})

            def handle_msg(self, msg):
                # As BaseComm's, without requiring IPython (plain mode): its
                # pre_execute and post_execute events fire around the callback.
                if self._msg_callback:
                    ipython = sys.modules.get("IPython")
                    shell = ipython.get_ipython() if ipython is not None else None
                    if shell:
                        shell.events.trigger("pre_execute")
                    self._msg_callback(msg)
                    if shell:
                        shell.events.trigger("post_execute")

        import logging

        class ErrorsToStderr(logging.Handler):
            """The `comm` package logs a handler's exception with its traceback: the user
            sees it on stderr. Its other records (an unknown target or comm id, as a
            frontend probing for targets causes) stay quiet, as in ipykernel."""

            def emit(self, record):
                if record.exc_info:
                    lines = [record.getMessage()] + clean_traceback(*record.exc_info)
                    sys.stderr.write("\n".join(lines) + "\n")

        logger = logging.getLogger("Comm")
        logger.addHandler(ErrorsToStderr())
        logger.propagate = False
        self.manager = CommManager()
        comm_module.create_comm = Comm
        comm_module.get_comm_manager = lambda: self.manager

    def handle(self, request):
        """A frontend's comm_open, comm_msg or comm_close, dispatched as ipykernel does;
        a comm_open nobody can take (no target, or `comm` never imported) is closed."""
        msg_type = request.get("msg_type")
        if msg_type not in ("comm_open", "comm_msg", "comm_close"):
            return {"type": "reply", "status": "error", "ename": "ValueError", "evalue": "not a comm message: %r" % msg_type}
        content = request.get("content") or {}
        if self.manager is None:
            if msg_type == "comm_open":
                emit({"type": "comm", "msg_type": "comm_close", "metadata": {}, "buffers": [],
                      "content": {"comm_id": content.get("comm_id", ""), "data": {}}})
            return {"type": "reply", "status": "ok"}
        header = request.get("header") or {}
        msg = {"header": header, "msg_id": header.get("msg_id", ""), "msg_type": msg_type,
               "parent_header": request.get("parent_header") or {}, "metadata": request.get("metadata") or {},
               "content": content, "buffers": [memoryview(base64.b64decode(b)) for b in request.get("buffers", [])]}
        state.allow_stdin = False  # a comm message has no stdin to answer input()
        state.interrupt_pending = False
        state.running = True  # output is acknowledged in order, and SIGINT interrupts the handler
        try:
            run_user_code(getattr(self.manager, msg_type), None, None, msg)
            flush_std()
        except KeyboardInterrupt:
            sys.stderr.write("KeyboardInterrupt in a comm handler\n")
        finally:
            state.running = False
        return {"type": "reply", "status": "ok"}

    def info(self, request):
        """comm_info_reply's content: the open comms, of target_name when one is given."""
        target = request.get("target_name")
        comms = self.manager.comms if self.manager is not None else {}
        return {"type": "reply", "status": "ok",
                "comms": {comm_id: {"target_name": c.target_name} for comm_id, c in list(comms.items())
                          if not target or c.target_name == target}}
