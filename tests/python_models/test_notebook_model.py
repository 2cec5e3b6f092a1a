"""Notebook cells drive the sandbox's model host (kernel/model_setup.cpp serves
the gpubox package to the kernel; python/gpubox/_zmtp.py reaches the agent
without pyzmq): in a real local sandbox whose kernel runs build/venv/bin/python
(torch), a cell captures an activation with
gpubox.Client().model("tiny") and steers a generate, and the results equal a
remote caller's bit for bit; what one side loads or unloads the other sees (one
model host, one copy of the weights). A kernel on a bare Python (a venv
without any package: no pyzmq, msgpack or numpy) still generates, in pure Python.
Interpreter: build/venv/bin/python."""

import importlib.util
import json
import os
import shutil
import subprocess
import tempfile

import gpubox
from model_harness import VENV_PYTHON, ModelSandboxTestCase, check_notebook_cell, notebook_cell

class NotebookCase(ModelSandboxTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        with gpubox.connect(cls.id) as client:
            client.model("tiny").wait_ready(timeout=60)

    def cell(self, code):
        """Runs code in the sandbox's kernel; the JSON it printed last."""
        with gpubox.connect(self.id) as client:
            result = client.call("kernel.execute", code=code, timeout=120)
        errors = [o for o in result["outputs"] if o.get("kind") == "error"]
        self.assertEqual(errors, [])
        stdout = "".join(o.get("text", "") for o in result["outputs"] if o.get("stream") == "stdout")
        return json.loads(stdout.splitlines()[-1])


class NotebookDrivesTheModelHost(NotebookCase):
    kernel_config = {"python": VENV_PYTHON}

    def test_a_cell_captures_and_steers_as_a_remote_caller_does(self):
        got = self.cell(notebook_cell(self.refs))
        # The kernel runs this Python: pyzmq's socket when it has pyzmq.
        self.assertEqual(got["transport"], "ZmqDealer" if importlib.util.find_spec("zmq") else "UnixDealer")
        with gpubox.connect(self.id) as client:
            check_notebook_cell(self, got, client.model("tiny"), self.refs)

    def test_one_model_host_for_the_cell_and_the_remote_caller(self):
        got = self.cell("""
import gpubox, json
gpubox.Client().load_model("second", %r, wait=True)
print(json.dumps(sorted(m["name"] for m in gpubox.Client().models())))
""" % self.refs["llama"])
        self.assertEqual(got, ["second", "tiny"])
        with gpubox.connect(self.id) as client:
            self.assertEqual(sorted(m["name"] for m in client.models()), ["second", "tiny"])
            client.unload_model("second")
        self.assertEqual(self.cell("import gpubox, json; print(json.dumps([m['name'] for m in gpubox.Client().models()]))"),
                         ["tiny"])

    def test_the_hooks_toolkit_reaches_the_model_host(self):
        got = self.cell("from gpubox import hooks; import gpubox, json; "
                        "print(json.dumps([len(hooks.names('tiny')), gpubox.Client().model('tiny').info()['hook_points']]))")
        self.assertEqual(got[0], got[1])
        self.assertGreater(got[0], 10)


class BareKernelPython(NotebookCase):
    """The kernel's Python has nothing installed: no pyzmq, no msgpack, no numpy."""

    @classmethod
    def setUpClass(cls):
        cls.bare = tempfile.mkdtemp(prefix="gpubox-bare-venv-")  # under /tmp: brought into the sandbox
        subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", cls.bare], check=True)
        cls.kernel_config = {"python": os.path.join(cls.bare, "bin", "python"), "mode": "plain"}
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        shutil.rmtree(cls.bare, ignore_errors=True)

    def test_a_cell_generates_in_pure_python(self):
        ids, steps = self.refs["generate_ids"], self.refs["new_tokens"]
        got = self.cell("""
import gpubox, json, importlib.util
m = gpubox.Client().model("tiny")
print(json.dumps({"tokens": m.generate(%r, max_new_tokens=%d, ignore_eos=True)["tokens"],
                  "hooks": len(m.hooks()), "msgpack": gpubox.protocol.msgpack.__name__,
                  "transport": type(m.client._socket).__name__,
                  "installed": [n for n in ("zmq", "msgpack", "numpy") if importlib.util.find_spec(n)]}))
""" % (ids, steps))
        self.assertEqual(got["installed"], [])
        self.assertEqual((got["msgpack"], got["transport"]), ("gpubox._msgpack", "UnixDealer"))
        self.assertEqual(got["tokens"], self.refs["greedy"])
        self.assertGreater(got["hooks"], 10)
