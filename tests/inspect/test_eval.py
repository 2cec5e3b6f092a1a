"""An Inspect evaluation end to end on local gpubox sandboxes (needs root): `inspect eval
tasks/gpubox_tools.py --sandbox gpubox` scores every sample as scripted and leaves no sandbox;
interrupted with SIGINT halfway it leaves none either; `inspect sandbox cleanup gpubox` ends
what --no-sandbox-cleanup kept, and only that."""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..")]
from eval_run import (CLI, HERE as TASK_DIR, INSPECT, become_subreaper, eval_command, listed,  # noqa: E402
                      log_path, private_env, reap_orphans, run_eval)
from prerequisite import missing  # noqa: E402

from inspect_ai.log import read_eval_log  # noqa: E402

SAMPLES = 16


class EvalTest(unittest.TestCase):
    """Each test in a private gpubox store, this process the subreaper of the agents the CLI detaches."""

    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0 or not os.access(CLI, os.X_OK) or not os.access(INSPECT, os.X_OK):
            missing("needs root, GPUBOX_CLI (%s) and the inspect venv's inspect (%s)" % (CLI, INSPECT))
        become_subreaper()

    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="gpubox-inspect-eval-")
        self.env = private_env(os.path.join(self.root, "state"))

    def tearDown(self):
        try:
            if listed(self.env):
                subprocess.run([CLI, "terminate", "--all"], env=self.env, capture_output=True, timeout=300)
        finally:
            reap_orphans()
            shutil.rmtree(self.root, ignore_errors=True)

    def test_every_sample_scores_as_scripted(self):
        run = run_eval(self.env, samples=SAMPLES)
        self.assertEqual(run.returncode, 0, run.output[-4000:])
        self.assertIsNotNone(run.log, "no eval log written:\n" + run.output[-4000:])
        log = read_eval_log(run.log)
        self.assertEqual(log.status, "success", log.error)
        self.assertEqual(log.eval.sandbox.type, "gpubox")
        self.assertEqual(len(log.samples), SAMPLES)
        for sample in log.samples:
            self.assertIsNone(sample.error, "sample %s: %s" % (sample.id, sample.error))
            score = sample.scores["reversed_token"]
            self.assertEqual(score.value, "C", "sample %s: %s" % (sample.id, score.explanation))
        self.assertEqual(log.results.scores[0].metrics["accuracy"].value, 1.0)
        self.assertEqual(listed(self.env), [])
        print("\n%d samples on gpubox in %.1f s: %.0f samples/minute"
              % (SAMPLES, run.seconds, SAMPLES * 60 / run.seconds), file=sys.stderr)

    def test_sigint_halfway_leaves_no_sandbox(self):
        """Ctrl-C at the terminal (SIGINT to inspect's process group) while samples sleep in their sandboxes:
        inspect exits soon, every sandbox ended, the log says cancelled."""
        log_dir = os.path.join(self.root, "logs")
        with open(os.path.join(self.root, "inspect.out"), "w+") as out:
            inspect = subprocess.Popen(eval_command(log_dir, samples=SAMPLES, sleep=300), env=self.env, cwd=TASK_DIR,
                                       stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                running = self._wait_for_sandboxes(inspect, 4, timeout=180)
                os.killpg(inspect.pid, signal.SIGINT)
                interrupted = time.monotonic()
                try:
                    inspect.wait(timeout=120)
                except subprocess.TimeoutExpired:
                    os.kill(inspect.pid, signal.SIGABRT)  # PYTHONFAULTHANDLER: every thread's stack to the output
                    inspect.wait(timeout=60)
                exit_seconds = time.monotonic() - interrupted
            finally:
                if inspect.poll() is None:
                    os.killpg(inspect.pid, signal.SIGKILL)
                    inspect.wait()
            out.seek(0)
            output = out.read()
        reap_orphans()
        self.assertGreaterEqual(running, 4, output[-4000:])
        # The samples sleep 300 s in bash (whose tool timeout is 120 s): the interrupt waits for neither.
        stacks = output.find("Fatal Python error")  # the SIGABRT's dump of every thread, top frames first
        self.assertLess(exit_seconds, 60, output[stacks:stacks + 16000] if stacks >= 0 else output[-4000:])
        self.assertEqual(listed(self.env), [], "sandboxes left after the interrupt:\n" + output[-4000:])
        log = read_eval_log(log_path(log_dir))
        self.assertEqual(log.status, "cancelled", output[-4000:])
        self.assertFalse([s for s in log.samples or [] if s.scores], "a sample finished before the interrupt")

    def test_sandbox_cleanup_ends_what_the_eval_kept(self):
        other = subprocess.run([CLI, "--json", "create", "--backend", "local", "--name", "not-inspect"],
                               env=self.env, capture_output=True, text=True, timeout=120)
        self.assertEqual(other.returncode, 0, other.stderr)
        run = run_eval(self.env, samples=4, extra=["--no-sandbox-cleanup"])
        self.assertEqual(run.returncode, 0, run.output[-4000:])
        kept = [s for s in listed(self.env) if s["name"].startswith("inspect-")]
        self.assertEqual(len(kept), 4, run.output[-4000:])
        cleaned = subprocess.run([INSPECT, "sandbox", "cleanup", "gpubox"], env=self.env, capture_output=True,
                                 text=True, timeout=300)
        reap_orphans()
        self.assertEqual(cleaned.returncode, 0, cleaned.stdout + cleaned.stderr)
        self.assertEqual([s["name"] for s in listed(self.env)], ["not-inspect"])

    def _wait_for_sandboxes(self, inspect, count, timeout):
        """Polls `gpubox ls` until count sandboxes run; how many did."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and inspect.poll() is None:
            running = len(listed(self.env))
            if running >= count:
                return running
            time.sleep(0.2)
        self.fail("inspect (exit %s) never had %d sandboxes running" % (inspect.poll(), count))


if __name__ == "__main__":
    unittest.main()
