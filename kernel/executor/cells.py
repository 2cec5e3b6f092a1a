"""One execute request: its started frame, the backend's run, the cell's figures, and its done frame with the error and the payload the cell recorded."""

from .channel import emit, send
from .figures import flush_figures
from .state import state


def record_error(ename, evalue, tb_lines):
    state.error = {"ename": ename, "evalue": evalue, "traceback": tb_lines}
    emit(dict(type="error", **state.error))


def ask_exit(keep_kernel=False):
    """exit / quit(): the execute_reply carries ipykernel's ask_exit payload, and the
    frontend (jupyter console) leaves; the kernel itself keeps running."""
    if not any(item.get("source") == "ask_exit" for item in state.payload):
        state.payload.append({"source": "ask_exit", "keepkernel": bool(keep_kernel)})


def execute(backend, request):
    state.allow_stdin = bool(request.get("allow_stdin", False))
    state.error = None
    state.payload = []
    state.interrupt_pending = False
    ok = False
    state.running = True
    try:
        send({"type": "started"})  # an interrupt that came since the request was sent lands from here on
        ok = backend.run(request["code"], int(request.get("execution_count", 0)),
                         bool(request.get("silent", False)), bool(request.get("store_history", True)))
        flush_figures()
        state.running = False
    except KeyboardInterrupt:  # from user code the backend does not catch (plain mode's reprs of the value)
        state.running = False
        if state.error is None:
            record_error("KeyboardInterrupt", "", ["KeyboardInterrupt"])
    if state.interrupt_pending and state.error is None:
        # It arrived while no user code ran (IPython's bookkeeping, the cell's figures) and
        # waited for some that never came: the cell counts as interrupted all the same.
        record_error("KeyboardInterrupt", "", ["KeyboardInterrupt"])
    state.interrupt_pending = False
    ok = ok and state.error is None
    reply = {"type": "done", "status": "ok" if ok else "error"}
    if not ok and state.error is not None:
        reply.update(state.error)
    if state.payload:
        reply["payload"] = state.payload
    return reply
