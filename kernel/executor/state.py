"""What the running request is doing, shared by every module, and what SIGINT does to it: a KeyboardInterrupt in user code, held while the channel is in use."""


class _State:
    running = False  # user code is running: SIGINT raises KeyboardInterrupt
    sending = 0  # inside a channel operation: an interrupt waits until it ends
    interrupt_pending = False
    error = None  # the error of the running cell: {ename, evalue, traceback}
    payload = []  # the running cell's execute_reply payload (ask_exit)
    final_frame = b""  # the cell's trailing result, held to go out with the next frame
    allow_stdin = False  # the running request may ask for input() (an execute_request's allow_stdin)


state = _State()


def on_sigint(signum, frame):
    if state.running and not state.sending:
        raise KeyboardInterrupt
    if state.running:
        state.interrupt_pending = True


def raise_pending_interrupt():
    if state.interrupt_pending and state.running and not state.sending:
        state.interrupt_pending = False
        raise KeyboardInterrupt
