"""The private channel to the agent on fd 3: frames of a 4-byte big-endian length and one JSON object, sent in order with what fds 1 and 2 hold."""

import json
import os
import struct
import sys
import threading

from .state import raise_pending_interrupt, state

CHANNEL_FD = 3
_send_lock = threading.Lock()
_received = bytearray()  # channel bytes read but not yet parsed (one read often holds a whole frame)


def _read_exact(n):
    while len(_received) < n:
        try:
            chunk = os.read(CHANNEL_FD, max(65536, n - len(_received)))
        except InterruptedError:
            continue
        if not chunk:
            os._exit(0)  # the agent closed the channel
        _received.extend(chunk)
    data = bytes(_received[:n])
    del _received[:n]
    return data


def recv():
    state.sending += 1
    try:
        (length,) = struct.unpack(">I", _read_exact(4))
        return json.loads(_read_exact(length))
    finally:
        state.sending -= 1


def flush_std():
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except Exception:
            pass


def _frame(msg):
    data = json.dumps(msg, default=repr).encode("utf-8", "surrogateescape")
    return struct.pack(">I", len(data)) + data


def send(msg, wait_ack=False):
    """Sends one frame; stdout and stderr are flushed first so output keeps its order.

    With wait_ack (rich output during a cell), waits until the agent has published
    everything the pipes held before the frame, and the frame: output written
    afterwards cannot overtake it; the agent's answer is returned. Between cells
    (a background thread) nothing waits: the main loop alone reads the channel then.
    """
    flush_std()
    with _send_lock:
        state.sending += 1
        try:
            if wait_ack and not state.running and msg.get("type") != "input_request":
                wait_ack = False
                msg["ack"] = False
            data = state.final_frame + _frame(msg)  # a held cell result goes first, in the same write
            state.final_frame = b""
            view = memoryview(data)
            while view:
                try:
                    view = view[os.write(CHANNEL_FD, view):]
                except InterruptedError:
                    pass
            reply = recv() if wait_ack else None
        finally:
            state.sending -= 1
    raise_pending_interrupt()
    return reply


def emit(msg):
    """Sends a rich output frame (display, execute_result, clear_output, error) in order."""
    send(msg, wait_ack=True)


def emit_final(msg):
    """Holds the cell's last rich frame (its trailing result) until the next frame,
    normally the cell's done frame, and sends both in one write: no user code
    writes after it, so nothing can overtake it and the agent need not answer it."""
    msg["ack"] = False
    with _send_lock:
        state.final_frame += _frame(msg)
