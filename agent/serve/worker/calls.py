"""Running calls: each in a thread of its own, one thread at a time reading the channel (Worker); cancels, credits and results."""

import ctypes
import inspect
import os
import threading
import time
import traceback

from . import tensor_wire
from .channel import pack
from .exposed import EXPOSED, SIGNATURES

TORCH_KINDS = ("torch",)  # a numpy array sent stays one here, even where torch imports
WORKER_FILE = "<gpubox-serve-worker>"  # where the worker's own code is: its frames are left out of tracebacks


class Cancelled(BaseException):
    """Raised in a call's thread when the agent cancels it (deadline, CANCEL)."""


def remote_traceback(error):
    """The traceback without the worker's own frames."""
    frames = [f for f in traceback.extract_tb(error.__traceback__)
              if not f.filename.startswith(WORKER_FILE) and not f.filename.startswith("<frozen importlib")]
    lines = ["Traceback (most recent call last):\n"] + traceback.format_list(frames)
    lines += traceback.format_exception_only(type(error), error)
    return "".join(lines)


def type_name(error):
    kind = type(error)
    return kind.__qualname__ if kind.__module__ == "builtins" else "%s.%s" % (kind.__module__, kind.__qualname__)


class Call:
    def __init__(self, call_id, name, fn, window):
        self.id = call_id
        self.name = name
        self.fn = fn
        self.credit = threading.Semaphore(window)
        self.cancelled = False
        self.thread = None  # ident while running
        self.generator = inspect.isgeneratorfunction(fn)


HANDOFF_S = 0.002  # a call that runs longer than this hands the channel to another thread
IDLE_S = 1.0       # this long without a call, the next thread in line sleeps until one comes


class Worker:
    """Runs calls, each in a thread of its own. One thread at a time reads
    the channel (the reader) and runs the calls it reads itself: a quick
    call costs no hand-off between threads at all. The next thread in line
    checks every HANDOFF_S while calls come, and takes over the reading from
    a reader that has been busy in one call that long, so a long call holds
    up nothing else (a cancel, a credit, another call) for more than a few
    milliseconds. Threads are started as they are needed."""

    def __init__(self, channel):
        self.channel = channel
        self.lock = threading.Lock()
        self.turn = threading.Condition(self.lock)
        self.calls = {}          # id -> Call; guarded by lock
        self.reader = None       # the reading thread's ident; guarded by lock
        self.busy_since = None   # when the reader began running a call; guarded by lock
        self.next_up = None      # the thread that takes over from a busy reader; guarded by lock
        self.last_call = 0.0     # guarded by lock

    def serve(self):
        me = threading.get_ident()
        with self.lock:
            self.wait_for_turn(me)
        while True:
            call, body, frames = self.read_call()
            with self.lock:
                now = time.monotonic()
                if now - self.last_call >= IDLE_S:
                    self.turn.notify_all()  # the next in line checks on this call
                self.busy_since = self.last_call = now
                alone = self.next_up is None
            if alone:
                threading.Thread(target=self.serve, daemon=True).start()
            if call is not None:
                try:
                    self.start_call(call, body, frames)
                except BaseException:
                    pass  # a cancellation that landed after the call ended
            del call, body, frames  # nothing here keeps the arguments' memfd mapped
            with self.lock:
                if self.reader == me:
                    self.busy_since = None  # still the reader: read on
                else:
                    self.wait_for_turn(me)

    def wait_for_turn(self, me):
        """Returns once this thread is the reader. REQUIRES: self.lock."""
        while True:
            if self.reader is None:
                self.reader = me
                return
            if self.next_up is None:
                self.next_up = me
            if self.next_up != me:
                self.turn.wait()
                continue
            if self.busy_since is not None and time.monotonic() - self.busy_since >= HANDOFF_S:
                self.reader, self.busy_since, self.next_up = me, None, None
                self.turn.notify()  # another thread becomes the next in line
                return
            active = time.monotonic() - self.last_call < IDLE_S
            self.turn.wait(HANDOFF_S if active else None)

    def read_call(self):
        """As the reader: handles messages until a call comes, registered
        before anything else is read (a cancel or credit for it finds it).
        (call or None when it was answered already, body, frames)."""
        while True:
            message = self.channel.read()
            if message is None:
                os._exit(0)
            body, frames = message
            if body.get("op") == "call":
                return self.register(body), body, frames
            self.handle(body, frames)  # quick: cancel, credit, released

    def handle(self, body, frames):
        op = body.get("op")
        call_id = body.get("id")
        if op == "cancel":
            with self.lock:
                call = self.calls.get(call_id)
                if call is not None:
                    call.cancelled = True
                    if call.thread is not None:
                        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(call.thread), ctypes.py_object(Cancelled))
        elif op == "released":
            self.channel.memfds.give_back(body.get("files") or [])
        elif op == "credit":
            with self.lock:
                call = self.calls.get(call_id)
            if call is not None:
                for _ in range(int(body.get("n", 1))):
                    call.credit.release()

    def register(self, body):
        """The Call for a call message, in self.calls; None (answered) for an unknown function."""
        call_id, name = body.get("id"), body.get("function")
        fn = EXPOSED.get(name)
        if fn is None:
            self.channel.send({"op": "error", "id": call_id, "code": "not_found",
                               "message": "no function %r; exposed: %s" % (name, ", ".join(EXPOSED))})
            return None
        call = Call(call_id, name, fn, int(body.get("window", 4)))
        with self.lock:
            self.calls[call_id] = call
        return call

    def start_call(self, call, body, frames):
        call_id, name = call.id, call.name
        try:
            args = tensor_wire.from_wire(body.get("args") or [], frames, TORCH_KINDS)
            kwargs = tensor_wire.from_wire(body.get("kwargs") or {}, frames, TORCH_KINDS)
            if not isinstance(args, list) or not isinstance(kwargs, dict):
                raise TypeError("args must be a list and kwargs a map")
            SIGNATURES[name].bind(*args, **kwargs)
        except Exception as error:
            with self.lock:
                self.calls.pop(call_id, None)
            self.channel.send({"op": "error", "id": call_id, "code": "invalid_request",
                               "message": "%s%s: %s" % (name, SIGNATURES[name], error)})
            return
        del body, frames
        self.run(call, args, kwargs)

    def run(self, call, args, kwargs):
        with self.lock:
            if call.cancelled:
                self.calls.pop(call.id, None)
                return
            call.thread = threading.get_ident()
        try:
            try:
                if call.generator:
                    count = 0
                    for item in call.fn(*args, **kwargs):
                        while not call.credit.acquire(timeout=0.1):
                            if call.cancelled:
                                raise Cancelled()
                        self.send_value({"op": "item", "id": call.id}, "item", item, call)
                        count += 1
                    self.finish(call, {"op": "result", "id": call.id, "items": count})
                else:
                    value = call.fn(*args, **kwargs)
                    self.send_value({"op": "result", "id": call.id}, "value", value, call, final=True)
            except Cancelled:
                self.finish(call, None)
            except BaseException as error:
                self.finish(call, {"op": "raised", "id": call.id, "type": type_name(error), "message": str(error),
                                   "traceback": remote_traceback(error)})
        except Cancelled:
            self.finish(call, None)

    def send_value(self, head, key, value, call, final=False):
        frames, keep = [], []
        try:
            head[key] = tensor_wire.to_wire(value, frames, keep)
            packed = pack(head)
        except Exception as error:
            raise TypeError("%s of %s cannot be sent: %s" % ("the result" if final else "an item", call.name, error)) from None
        if final:
            self.finish(call, packed, frames)
        else:
            self.channel.send_packed(packed, frames)

    def finish(self, call, body, frames=()):
        with self.lock:
            if call.thread is not None:
                # A cancel scheduled but not delivered yet must not land later, in the next call or a read.
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(call.thread), None)
            call.thread = None
            self.calls.pop(call.id, None)
            cancelled = call.cancelled
        if body is not None and not cancelled:
            if isinstance(body, dict):
                self.channel.send(body, frames)
            else:
                self.channel.send_packed(body, frames)


