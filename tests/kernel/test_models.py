"""Setup from config inside the real agent (not PID 1; the hidden-model mounts
are tested in a real sandbox by test_run_code): preloaded torchscript and
safetensors models bound under their var_name, model_info in the kernel and in
kernel.info, a broken model reported while the others load and the kernel
stays usable, everything replayed after a crash and a restart, workspace
libraries importable, the same in plain mode, and the executor's state
("setting up") in sys.info and kernel.info while setup runs."""
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import unittest

import torch

from tiny_models import TinyNet, write_safetensors

from test_agent_kernel import AGENT, AgentKernelCase
import gpubox  # on sys.path once test_agent_kernel is imported


MODELS_DIR = None


def setUpModule():
    global MODELS_DIR
    MODELS_DIR = tempfile.mkdtemp(prefix="gpubox-models-")
    torch.manual_seed(0)
    torch.jit.script(TinyNet()).save(os.path.join(MODELS_DIR, "tiny-net.pt"))
    write_safetensors(os.path.join(MODELS_DIR, "embeddings.safetensors"),
                      {"weight": torch.arange(12, dtype=torch.float32).reshape(3, 4),
                       "steps": torch.tensor([5], dtype=torch.int64)})
    with open(os.path.join(MODELS_DIR, "corrupt-net.pt"), "wb") as f:
        f.write(b"this is not a TorchScript archive")
    os.mkdir(os.path.join(MODELS_DIR, "secret-llama"))
    shutil.copy(os.path.join(MODELS_DIR, "tiny-net.pt"), os.path.join(MODELS_DIR, "secret-llama", "weights.pt"))


def tearDownModule():
    shutil.rmtree(MODELS_DIR, ignore_errors=True)


def model_config(mode=""):
    config = {
        "python": "/usr/bin/python3",
        "workspace_dir": os.path.join(MODELS_DIR, "workspace"),
        "setup_code": ["init_ran = model.fc.out_features"],  # the custom init code sees the models
        "models": [
            {"name": "tiny-net", "path": os.path.join(MODELS_DIR, "tiny-net.pt"), "loader": "torchscript"},
            {"name": "corrupt-net", "path": os.path.join(MODELS_DIR, "corrupt-net.pt"), "loader": "torchscript",
             "var_name": "corrupt"},
            {"name": "embeddings", "path": os.path.join(MODELS_DIR, "embeddings.safetensors"),
             "loader": "safetensors", "var_name": "emb", "dtype": "float64"},
            {"name": "secret-llama", "path": os.path.join(MODELS_DIR, "secret-llama", "weights.pt"),
             "loader": "torchscript", "var_name": "secret", "hidden": True},
        ],
    }
    if mode:
        config["mode"] = mode
    return config


class ModelsInAgentTest(AgentKernelCase):
    kernel_config = None  # set in setUpClass: the files exist only then

    @classmethod
    def setUpClass(cls):
        cls.kernel_config = model_config()

    def run_ok(self, code):
        result, items = self.execute(code)
        self.assertEqual(result["status"], "ok", (result, items))
        return "".join(i.get("text", "") for i in items if i.get("stream") == "stdout")

    def test_models_are_bound_and_usable_in_a_cell(self):
        out = self.run_ok("import torch\n"
                          "print(tuple(model(torch.ones(2, 4)).shape))\n"
                          "print(emb['weight'].dtype, emb['weight'][2, 3].item(), emb['steps'].dtype)\n"
                          "print(init_ran)\n"
                          "print('corrupt' in dir(), 'secret' in dir())")
        self.assertEqual(out, "(2, 3)\ntorch.float64 11.0 torch.int64\n3\nFalse False\n")

    def test_model_info_in_the_kernel_and_in_kernel_info(self):
        text = self.run_ok("print(model_info)")
        info = self.client.call("kernel.info")
        self.assertEqual(info["model_info"] + "\n", text)
        models = {m["var_name"]: m for m in info["models"]}
        self.assertEqual(list(models), ["model", "corrupt", "emb", "secret"], "in config order")
        tiny = models["model"]
        self.assertEqual((tiny["status"], tiny["name"], tiny["loader"], tiny["device"], tiny["dtype"], tiny["parameters"]),
                         ("loaded", "tiny-net", "torchscript", "cpu", "torch.float32", 15))
        self.assertIn("TinyNet", tiny["type"])
        self.assertEqual((models["emb"]["parameters"], models["emb"]["type"]), (13, "dict of 2 tensors"))
        self.assertEqual(models["corrupt"]["status"], "failed")
        self.assertIn("RuntimeError", models["corrupt"]["error"])
        self.assertIn("- corrupt: corrupt-net", text)
        self.assertIn("FAILED to load: RuntimeError", text)
        self.assertIn("type: RecursiveScriptModule (TinyNet); device: cpu; parameters: 15; dtype: torch.float32", text)

    def test_a_hidden_model_outside_a_sandbox_is_not_loaded_and_never_named(self):
        self.run_ok("1")
        info = self.client.call("kernel.info")
        secret = [m for m in info["models"] if m["var_name"] == "secret"][0]
        self.assertEqual(secret["status"], "failed")
        self.assertIn("only where the agent is PID 1 of its own mount namespace", secret["error"])
        self.assertNotIn("name", secret)
        self.assertNotIn("path", secret)
        shown = json.dumps(info) + json.dumps(self.client.call("sys.info")) + self.run_ok("print(model_info)")
        self.assertNotIn("secret-llama", shown)
        with open(os.path.join(self.dir, "agent.log")) as f:
            log = f.read()
        self.assertNotIn("secret-llama", log)
        self.assertIn('"var_name":"secret","model":"(hidden)"', log)

    def test_a_broken_model_is_in_the_agent_log(self):
        self.run_ok("1")
        with open(os.path.join(self.dir, "agent.log")) as f:
            lines = [json.loads(line) for line in f if "model" in line]
        failed = [l for l in lines if l["msg"] == "model failed to load"]
        self.assertEqual([l["model"] for l in failed], ["corrupt-net", "(hidden)"])
        self.assertIn("RuntimeError", failed[0]["error"])  # (loaded models log at info; the harness logs warn+)

    def test_setup_is_replayed_after_a_crash_and_a_restart(self):
        self.run_ok("model.marker = 1")
        result, _ = self.execute("import os; os._exit(1)")
        self.assertTrue(result.get("died"), result)
        out = self.run_ok("print(hasattr(model, 'marker'), model.fc.in_features, emb['steps'].item(), init_ran)\n"
                          "print(model_info.splitlines()[0])")
        self.assertEqual(out, "False 4 5 3\nPre-loaded Models:\n", "a fresh model, loaded again")
        self.client.call("kernel.restart")
        self.assertEqual(self.run_ok("print(type(model).__name__, sorted(emb))"),
                         "RecursiveScriptModule ['steps', 'weight']\n")
        self.assertEqual(self.client.call("kernel.info")["executor"]["implementation"], "ipython")

    def test_a_workspace_library_written_later_imports(self):
        workspace = os.path.join(MODELS_DIR, "workspace")
        self.run_ok("1")
        self.assertTrue(os.path.isdir(workspace), "created by the setup")
        with open(os.path.join(workspace, "wslib_%d.py" % os.getpid()), "w") as f:
            f.write("def answer():\n    return 42\n")
        self.assertEqual(self.run_ok("import wslib_%d as w\nprint(w.answer())" % os.getpid()), "42\n")
        self.assertEqual(self.run_ok("import sys\nprint(sys.path[0])"), workspace + "\n")


class ModelsInPlainModeTest(AgentKernelCase):
    kernel_config = None

    @classmethod
    def setUpClass(cls):
        cls.kernel_config = model_config(mode="plain")

    def test_models_and_report_in_plain_mode(self):
        result, items = self.execute("print(model.fc.out_features, emb['weight'].shape[1])")
        self.assertEqual(result["status"], "ok", items)
        self.assertEqual(items[0]["text"], "3 4\n")
        info = self.client.call("kernel.info")
        self.assertEqual(info["executor"]["implementation"], "plain")
        self.assertEqual([m["status"] for m in info["models"]], ["loaded", "failed", "loaded", "failed"])
        result, items = self.execute("model_info")  # a trailing expression shows the text, unquoted
        self.assertEqual(items[0]["data"]["text/plain"], info["model_info"])


class SetupStateTest(AgentKernelCase):
    """While setup runs after the agent's start, a kernel.restart or a crash, sys.info's
    executor and kernel.info's executor_state say "setting up" (not "idle": requests
    wait for it); "idle" once it is done. The setup code waits for a file the test
    creates, so each phase lasts exactly as long as the test needs."""
    kernel_config = None

    @classmethod
    def setUpClass(cls):
        cls.gate_dir = tempfile.mkdtemp(prefix="gpubox-setup-gate-")
        cls.gate = os.path.join(cls.gate_dir, "go")
        wait = "import os, time\nwhile not os.path.exists(%r):\n    time.sleep(0.02)\n" % cls.gate
        cls.kernel_config = {"python": "/usr/bin/python3", "preload": True,
                             "setup_code": [wait + "waited = True"]}

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.gate_dir, ignore_errors=True)

    def states(self):
        sys_info = self.client.call("sys.info")["components"]["kernel"]
        info = self.client.call("kernel.info")
        return sys_info["executor"], info

    def wait_until_setup_code_runs(self, allowed_before, old_pid=None):
        """Waits until an executor other than old_pid has started and runs the setup code (its
        ready frame is in kernel.info); meanwhile only allowed_before or "setting up" may show."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            state, info = self.states()
            self.assertIn(state, allowed_before + ("setting up",))
            if info["executor"] and info["executor"]["pid"] != old_pid:
                return
            time.sleep(0.02)
        self.fail("the executor did not start within 60 s")

    def assert_setting_up(self, busy=False):
        for _ in range(5):  # and it stays so while the setup code waits
            state, info = self.states()
            self.assertEqual(state, "setting up")
            self.assertEqual(info["executor_state"], "setting up")
            self.assertEqual(info["busy"], busy, "busy: a request is in flight")
            time.sleep(0.05)

    def finish_setup(self):
        with open(self.gate, "w"):
            pass
        deadline = time.monotonic() + 30
        while self.states()[0] != "idle":
            self.assertLess(time.monotonic(), deadline, "still not idle 30 s after the setup could end")
            time.sleep(0.02)
        state, info = self.states()
        self.assertEqual((state, info["executor_state"], info["busy"]), ("idle", "idle", False))

    def in_background(self, method, **params):
        """Calls method on a client of its own in a thread; join() gives its result."""
        done = {}

        def call():
            try:
                with gpubox.Client("ipc://%s/rpc.sock" % self.dir) as client:
                    if method == "kernel.execute":
                        with client.stream(method, **params) as stream:
                            list(stream)
                            done["result"] = stream.result
                    else:
                        done["result"] = client.call(method, **params)
            except Exception as e:  # shown by the assertion on the result
                done["result"] = e
        thread = threading.Thread(target=call, daemon=True)  # a failed test must not hang the run
        thread.start()
        return lambda: (thread.join(60), done.get("result"))[1]

    def test_setting_up_after_start_restart_and_crash(self):
        # The agent's start: preload runs the setup in the background.
        self.wait_until_setup_code_runs(("not started",))
        self.assert_setting_up()
        self.finish_setup()
        result, _ = self.execute("waited")
        self.assertEqual(result["status"], "ok")

        # kernel.restart: the setup is replayed while the call waits.
        os.unlink(self.gate)
        pid = self.client.call("kernel.info")["executor"]["pid"]
        restart = self.in_background("kernel.restart")
        self.wait_until_setup_code_runs(("idle", "not started"), old_pid=pid)
        self.assert_setting_up()
        self.finish_setup()
        self.assertEqual(restart(), {"restarted": True, "restarts": 1})

        # A crash: the executor restarts with its setup replayed before the cell's reply.
        os.unlink(self.gate)
        pid = self.client.call("kernel.info")["executor"]["pid"]
        crash = self.in_background("kernel.execute", code="import os; os._exit(3)")
        self.wait_until_setup_code_runs(("idle", "busy"), old_pid=pid)
        self.assert_setting_up(busy=True)  # the crashed cell's reply waits for the restart
        self.finish_setup()
        crashed = crash()
        self.assertTrue(crashed["died"], crashed)
        self.assertEqual(self.client.call("sys.info")["components"]["kernel"]["restarts"], 2)


class BadModelConfigTest(unittest.TestCase):
    """The agent refuses a bad kernel.models entry before starting, naming the key."""

    def check(self, kernel, expected):
        done = subprocess.run([AGENT, "--check-config"], env=dict(os.environ, GPUBOX_CONFIG=json.dumps({"kernel": kernel})),
                              capture_output=True, text=True, timeout=30)
        self.assertEqual(done.returncode, 2, done.stdout + done.stderr)
        self.assertIn(expected, done.stderr)

    def test_bad_entries_name_their_key(self):
        model = {"name": "m", "path": "/models/m.pt", "loader": "torchscript"}
        self.check({"models": [dict(model, loader="onnx")]}, "kernel.models[0].loader: expected")
        self.check({"models": [dict(model, var_name="1x")]}, "kernel.models[0].var_name: expected a Python identifier")
        self.check({"models": [dict(model, path="rel/m.pt")]}, "kernel.models[0].path: expected an absolute path")
        self.check({"models": [dict(model, device="tpu")]}, "kernel.models[0].device: expected")
        self.check({"models": [dict(model, colour=1)]}, "kernel.models[0].colour: unknown key")
        self.check({"models": [model, dict(model, name="n")]}, "kernel.models[1].var_name: expected a variable no other")
        self.check({"models": [{"path": "/m", "loader": "torchscript"}]}, "kernel.models[0].name: required")
        self.check({"workspace_dir": "ws"}, "kernel.workspace_dir: expected an absolute path")


if __name__ == "__main__":
    unittest.main()
