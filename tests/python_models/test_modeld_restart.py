"""modeld killed (by its pid, from sys.info) in the middle of a generate through
the agent: the caller gets `unavailable` saying so, the agent restarts modeld,
its model is ready again and generates the same tokens. A model loaded at run
time (model.load) comes back after a restart too; one unloaded does not."""

import os
import signal
import unittest

from model_harness import ModelHostTestCase, gpubox, wait_until


class ModeldRestartTest(ModelHostTestCase):
    def test_kill_mid_generate_then_model_comes_back(self):
        host = self.model_host()
        pid, restarts = host["pid"], host["restarts"]
        model = self.client.model("tiny")
        # The stream's credit holds modeld back after a window of unread steps: it is mid-generate when killed.
        stream = model.generate_stream(self.refs["generate_ids"], max_new_tokens=200, ignore_eos=True)
        self.assertEqual(next(stream)["step"], 0)
        os.kill(pid, signal.SIGKILL)
        with self.assertRaises(gpubox.RpcError) as caught:
            for _ in stream:
                pass
        self.assertEqual(caught.exception.code, "unavailable", caught.exception.message)
        self.assertIn("the model host exited", caught.exception.message)
        self.assertIn("model.generate", caught.exception.message)

        def back():
            host = self.model_host()
            return (host["state"] == "running" and host["restarts"] == restarts + 1 and host["pid"] != pid
                    and all(m["state"] == "ready" for m in host["models"]))
        self.assertTrue(wait_until(back, timeout=60, interval=0.2), self.model_host())
        result = model.generate(self.refs["generate_ids"], max_new_tokens=self.refs["new_tokens"], ignore_eos=True)
        self.assertEqual(result["tokens"], self.refs["greedy"])

    def test_models_loaded_at_run_time_come_back_after_a_restart(self):
        self.client.load_model("runtime", self.refs["llama"], wait=True)
        self.client.load_model("dropped", self.refs["llama"], wait=True)
        self.client.unload_model("dropped")
        host = self.model_host()
        os.kill(host["pid"], signal.SIGKILL)

        def back():
            now = self.model_host()
            return (now["state"] == "running" and now["pid"] != host["pid"]
                    and sorted(m["name"] for m in now["models"]) == ["runtime", "tiny"]
                    and all(m["state"] == "ready" for m in now["models"]))
        self.assertTrue(wait_until(back, timeout=60, interval=0.2), self.model_host())
        result = self.client.model("runtime").generate(self.refs["generate_ids"], max_new_tokens=self.refs["new_tokens"],
                                                       ignore_eos=True)
        self.assertEqual(result["tokens"], self.refs["greedy"])
        self.client.unload_model("runtime")


if __name__ == "__main__":
    unittest.main()
