"""The serve worker's own flow control (rpc/PROTOCOL.md, "Served functions",
the worker channel's credit): a generator sends at most the call's "window"
items ahead of the agent's {"op": "credit"}, one more per credit, and a
cancel ends a generator that waits for credit. The worker's package
(agent/serve/worker/ with the two client modules the agent embeds beside it)
runs here against a recording channel: no agent, no sockets."""

import os
import shutil
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))


def load_worker_package():
    """The package as the agent embeds it: agent/serve/worker/ plus tensor_wire.py and _msgpack.py."""
    base = tempfile.mkdtemp(prefix="gpubox-worker-credit-")
    package = os.path.join(base, "gpubox_serve_worker_under_test")
    shutil.copytree(os.path.join(ROOT, "agent", "serve", "worker"), package)
    for module in ("tensor_wire.py", "_msgpack.py"):
        shutil.copy(os.path.join(ROOT, "python", "gpubox", module), package)
    sys.path.insert(0, base)
    import gpubox_serve_worker_under_test.calls as calls
    import gpubox_serve_worker_under_test.channel as channel
    import gpubox_serve_worker_under_test.exposed as exposed
    return base, calls, channel, exposed


class RecordingChannel:
    """The worker's channel, keeping what the worker sends."""

    def __init__(self, unpack):
        self.unpack = unpack
        self.sent = []
        self.changed = threading.Condition()

    def send(self, body, frames=()):
        with self.changed:
            self.sent.append(body)
            self.changed.notify_all()

    def send_packed(self, packed, frames=()):
        self.send(self.unpack(packed), frames)

    def wait_for(self, count, timeout=10):
        with self.changed:
            self.changed.wait_for(lambda: len(self.sent) >= count, timeout)
            return list(self.sent)


class WorkerCreditTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.base, cls.calls, channel, exposed = load_worker_package()
        cls.unpack = staticmethod(channel.unpack)

        def count(n):
            yield from range(n)

        exposed.EXPOSED["count"] = count
        exposed.SIGNATURES["count"] = exposed.inspect.signature(count)

    @classmethod
    def tearDownClass(cls):
        sys.path.remove(cls.base)
        shutil.rmtree(cls.base, ignore_errors=True)

    def start(self, n, window):
        self.channel = RecordingChannel(self.unpack)
        self.worker = self.calls.Worker(self.channel)
        body = {"op": "call", "id": 7, "function": "count", "args": [n], "kwargs": {}, "window": window}
        call = self.worker.register(body)
        self.thread = threading.Thread(target=self.worker.start_call, args=(call, body, []), daemon=True)
        self.thread.start()

    def items(self):
        return [m["item"] for m in self.channel.sent if m.get("op") == "item"]

    def settle(self):
        """Gives a generator that would overrun its window the time to do it."""
        time.sleep(0.3)

    def test_a_generator_sends_no_more_than_its_window_ahead(self):
        self.start(10, window=2)
        self.channel.wait_for(2)
        self.settle()
        self.assertEqual(self.items(), [0, 1])

    def test_each_credit_lets_one_more_item_go(self):
        self.start(10, window=2)
        self.channel.wait_for(2)
        self.worker.handle({"op": "credit", "id": 7, "n": 1}, [])
        self.channel.wait_for(3)
        self.settle()
        self.assertEqual(self.items(), [0, 1, 2])
        self.worker.handle({"op": "credit", "id": 7, "n": 8}, [])
        sent = self.channel.wait_for(11)
        self.thread.join(10)
        self.assertEqual(self.items(), list(range(10)))
        self.assertEqual(sent[-1], {"op": "result", "id": 7, "items": 10})

    def test_a_cancel_ends_a_generator_waiting_for_credit(self):
        self.start(10, window=1)
        self.channel.wait_for(1)
        self.worker.handle({"op": "cancel", "id": 7}, [])
        self.thread.join(10)
        self.assertFalse(self.thread.is_alive())
        self.assertEqual(self.items(), [0], "nothing after the cancel, not even a result")
        self.assertEqual(self.worker.calls, {})


if __name__ == "__main__":
    unittest.main()
