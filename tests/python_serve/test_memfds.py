"""Warm memfds between the agent and the serve worker (agent/serve/memfd_pool.h,
agent/serve/worker/channel.py's ResultMemfds): reused, and never while the other side still maps
them, so no call ever sees or changes another call's bytes. Real agent, real
worker; numpy arrays (the worker builds numpy for them in both variants).
"""

import os
import shutil
import sys
import tempfile
import threading
import time
import unittest

if os.environ.get("GPUBOX_TEST_NO_TORCH"):
    sys.modules["torch"] = None

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
from agent_harness import Agent  # noqa: E402

import gpubox  # noqa: E402
from gpubox import served  # noqa: E402
import numpy as np  # noqa: E402

N = 1 << 18  # float32: 1 MiB, over the memfd threshold


def as_numpy(value):
    return value.numpy() if hasattr(value, "numpy") else np.asarray(value)


def agent_memfds(pid, name):
    """The agent's open memfds called name (distinct inodes)."""
    found = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if target.startswith("/memfd:%s " % name):
            found.add(os.stat("/proc/%d/fd/%s" % (pid, fd)).st_ino)
    return found


class MemfdReuseTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.agent = Agent(config={"kernel": {"python": sys.executable}})
        cls.remote = tempfile.mkdtemp(prefix="gpubox-memfds-")
        cls.client = gpubox.Client(cls.agent.ipc)
        served.serve(cls.client, os.path.join(HERE, "memfd_interface.py"), "memfds", remote_dir=cls.remote)
        cls.service = served.Service(cls.client, "memfds")

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.agent.stop()
        shutil.rmtree(cls.remote, ignore_errors=True)

    def setUp(self):
        self.service.call("drop")

    def test_a_kept_argument_is_never_overwritten_by_later_calls(self):
        for value in (1.0, 2.0, 3.0, 4.0, 5.0, 6.0):  # more kept than the pool holds: one-off memfds too
            self.assertEqual(self.service.call("keep", np.full(N, value, dtype=np.float32)), N * value)
        for value in range(10, 30):
            self.assertEqual(self.service.call("ends", np.full(N, value, dtype=np.float32)), [value] * 4)
        self.assertEqual(self.service.call("kept_sums"), [N * v for v in (1.0, 2.0, 3.0, 4.0, 5.0, 6.0)])
        self.service.call("drop")  # given back now: reused, still only the new bytes
        for value in range(30, 40):
            self.assertEqual(self.service.call("ends", np.full(N + 3, value, dtype=np.float32)), [value] * 4)

    def test_results_still_being_sent_are_never_rewritten(self):
        # A slow reader: the agent still holds (maps) earlier items while the
        # worker makes the next ones, so it must not reuse their memfds.
        stream = self.service.stream("filled", N, 24)
        for i, item in enumerate(stream):
            array = as_numpy(item)
            self.assertEqual(array.shape, (N,))
            self.assertTrue((array == i).all(), "item %d: got values %s..%s" % (i, array.min(), array.max()))
            if i < 8:
                time.sleep(0.05)
        self.assertEqual(i, 23)

    def test_concurrent_callers_get_their_own_bytes(self):
        errors = []

        def caller(value):
            client = gpubox.Client(self.agent.ipc)
            try:
                service = served.Service(client, "memfds")
                for round_ in range(8):
                    sent = np.full(N + round_, value + round_, dtype=np.float32)
                    back = as_numpy(service.call("same", sent))
                    if back.shape != sent.shape or not (back == sent).all():
                        errors.append("caller %s round %d: got %s..%s" % (value, round_, back.min(), back.max()))
            except Exception as error:  # reported below
                errors.append("caller %s: %r" % (value, error))
            finally:
                client.close()

        threads = [threading.Thread(target=caller, args=(100.0 * k,)) for k in range(1, 4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        self.assertEqual(errors, [])

    def test_memfds_are_reused_and_bounded(self):
        worker = self.service.call("pid")
        agent_seen = set()
        for value in range(20):
            back = as_numpy(self.service.call("same", np.full(N, value, dtype=np.float32)))
            self.assertTrue((back == value).all())
            agent_seen |= agent_memfds(self.agent.process.pid, "gpubox-serve-in")
        # The agent's inputs: the same few memfds over and over (MemfdPool.kMaxSlots = 4).
        self.assertGreaterEqual(len(agent_seen), 1)
        self.assertLessEqual(len(agent_seen), 4)
        # The worker's results: its pool stays mapped there, at most 4.
        mapped = self.service.call("memfds")
        self.assertIn("/memfd:gpubox-serve-out", mapped)
        self.assertLessEqual(mapped["/memfd:gpubox-serve-out"], 4)
        self.assertEqual(self.service.call("pid"), worker)  # one worker all along


if __name__ == "__main__":
    unittest.main()
