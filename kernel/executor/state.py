"""What the running request is doing, shared by every module, and what SIGINT does to it: a KeyboardInterrupt in user code, held while the channel is in use or the executor's and IPython's own code runs."""


class _State:
    running = False  # a request runs: its output is acknowledged in order, and SIGINT is for it
    user_code = False  # the cell's own code runs (see run_user_code): SIGINT raises KeyboardInterrupt
    sending = 0  # inside a channel operation: an interrupt waits until it ends
    interrupt_pending = False
    error = None  # the error of the running cell: {ename, evalue, traceback}
    payload = []  # the running cell's execute_reply payload (ask_exit)
    final_frame = b""  # the cell's trailing result, held to go out with the next frame
    allow_stdin = False  # the running request may ask for input() (an execute_request's allow_stdin)


state = _State()


def on_sigint(signum, frame):
    if state.user_code and not state.sending:
        raise KeyboardInterrupt
    if state.running:
        state.interrupt_pending = True


def raise_pending_interrupt():
    if state.interrupt_pending and state.user_code and not state.sending:
        state.interrupt_pending = False
        raise KeyboardInterrupt


def run_user_code(run, *args, **kwargs):
    """run(*args, **kwargs) as the cell's own code: an interrupt raises KeyboardInterrupt in it,
    and one that came before it (during IPython's bookkeeping) lands as it starts. Outside it
    an interrupt only waits: a KeyboardInterrupt raised in IPython's or the executor's code
    can leave a lock of theirs held (IPython's history Event, as each cell begins), and the
    next cell would wait on it forever. Nested (user code running a cell of its own), the
    outer code stays interruptible."""
    outer, state.user_code = state.user_code, True  # no check for signals between this and the try
    try:
        raise_pending_interrupt()
        return run(*args, **kwargs)
    finally:
        state.user_code = outer


async def run_user_code_async(run, *args, **kwargs):
    """run_user_code for a coroutine function (IPython's run_code)."""
    outer, state.user_code = state.user_code, True
    try:
        raise_pending_interrupt()
        return await run(*args, **kwargs)
    finally:
        state.user_code = outer
