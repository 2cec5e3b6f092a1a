"""gpubox run-code against a real local sandbox (the real agent as PID 1 of its
own namespaces), whose config preloads a visible and a hidden model: streams
printed as they arrive, results, a matplotlib figure saved as a PNG file, exit
1 with the traceback when a cell raises, code from stdin, --json, --timeout,
usage errors; the hidden model loaded through a path that does not reveal it,
its name and path absent from kernel.info, sys.info and model_info.

Run by ctest with Debian's /usr/bin/python3; needs root, GPUBOX_CLI naming the CLI.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import torch

from tiny_models import TinyNet

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from local_children import become_subreaper, reap_orphans  # noqa: E402
from kernel_harness import requires  # noqa: E402

CLI = os.environ.get("GPUBOX_CLI", "")
HIDDEN_NAME = "secret-llama-7b"


@requires(CLI and os.geteuid() == 0, "needs GPUBOX_CLI and root")
class RunCodeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # The agents the CLI detaches are reparented here and reaped, as init would.
        become_subreaper()
        cls.scratch = tempfile.mkdtemp(prefix="gpubox-run-code-")
        cls.env = dict(os.environ, XDG_STATE_HOME=os.path.join(cls.scratch, "state"))
        models = os.path.join(cls.scratch, "models")
        os.makedirs(os.path.join(models, HIDDEN_NAME))
        torch.jit.script(TinyNet()).save(os.path.join(models, "tiny.pt"))
        torch.jit.script(TinyNet()).save(os.path.join(models, HIDDEN_NAME, "weights.pt"))
        config = {"kernel": {"python": "/usr/bin/python3", "models": [
            {"name": "tiny", "path": "/models/tiny.pt", "loader": "torchscript"},
            {"name": HIDDEN_NAME, "path": "/models/%s/weights.pt" % HIDDEN_NAME, "loader": "torchscript",
             "var_name": "secret", "hidden": True}]}}
        config_path = os.path.join(cls.scratch, "config.json")
        with open(config_path, "w") as f:
            json.dump(config, f)
        created = cls.cli("create", "--config", config_path, "--mount", models + ":/models:ro")
        if created.returncode != 0:
            raise RuntimeError("gpubox create failed: " + created.stderr)
        cls.id = created.stdout.strip()

    @classmethod
    def tearDownClass(cls):
        done = cls.cli("terminate", "--all")
        reap_orphans()
        shutil.rmtree(cls.scratch, ignore_errors=True)
        if done.returncode != 0:
            raise RuntimeError("gpubox terminate failed: " + done.stderr)

    @classmethod
    def cli(cls, *args, stdin=None, cwd=None, timeout=120):
        return subprocess.run([CLI, *args], env=cls.env, capture_output=True, text=True, timeout=timeout,
                              input=stdin, cwd=cwd)

    def run_code(self, *args, **kwargs):
        return self.cli("run-code", self.id, *args, **kwargs)

    def out_dir(self):
        path = tempfile.mkdtemp(dir=self.scratch)
        return path

    def test_streams_and_results(self):
        done = self.run_code("import sys\nprint('one')\nprint('two', file=sys.stderr)\nprint('three')\n6 * 7")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(done.stdout, "one\nthree\n42\n")
        self.assertEqual(done.stderr, "two\n")

    def test_output_is_printed_as_it_arrives(self):
        process = subprocess.Popen([CLI, "run-code", self.id, "import time\nprint('early', flush=True)\ntime.sleep(4)\nprint('late')"],
                                   env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            first = process.stdout.readline()
            self.assertEqual(first, "early\n")
            self.assertIsNone(process.poll(), "the first line came while the cell still ran")
            rest, _ = process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        self.assertEqual(rest, "late\n")
        self.assertEqual(process.returncode, 0)

    def test_a_matplotlib_figure_is_saved_as_png(self):
        out = self.out_dir()
        code = "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()\nprint('plotted')"
        done = self.run_code(code, "--out-dir", out)
        self.assertEqual(done.returncode, 0, done.stderr)
        path = os.path.join(out, "output-1.png")
        self.assertEqual(done.stdout, "[image saved: %s]\nplotted\n" % path, "shown where plt.show() is called")
        with open(path, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        again = self.run_code(code, "--out-dir", out)
        self.assertIn(os.path.join(out, "output-2.png"), again.stdout, "an existing file is never replaced")
        self.assertEqual(sorted(os.listdir(out)), ["output-1.png", "output-2.png"])

    def test_default_out_dir_is_the_current_dir_and_svg_is_text(self):
        out = self.out_dir()
        done = self.run_code("display({'image/svg+xml': '<svg xmlns=\"http://www.w3.org/2000/svg\"/>'}, raw=True)",
                             cwd=out)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(done.stdout, "[image saved: ./output-1.svg]\n")
        with open(os.path.join(out, "output-1.svg")) as f:
            self.assertEqual(f.read(), '<svg xmlns="http://www.w3.org/2000/svg"/>')

    def test_a_raising_cell_exits_1_with_its_traceback_on_stderr(self):
        done = self.run_code("print('before')\ndef f():\n    raise ValueError('bad value')\nf()")
        self.assertEqual(done.returncode, 1)
        self.assertEqual(done.stdout, "before\n")
        self.assertIn("ValueError: bad value", done.stderr)
        self.assertIn("----> 4 f()", done.stderr)
        self.assertNotIn("\x1b[", done.stderr, "no colours into a pipe")

    def test_code_from_stdin(self):
        for args in (["-"], []):
            done = self.run_code(*args, stdin="x = 20\nprint(x + 1)\n")
            self.assertEqual((done.returncode, done.stdout), (0, "21\n"), (args, done.stderr))

    def test_a_cell_beyond_the_body_limit_runs(self):
        # 3 MB of code: more than the agent's 1 MiB body limit, so it travels as an attachment.
        code = "data = '" + "x" * (3 << 20) + "'\nprint(len(data))\n"
        ran = self.run_code("-", stdin=code)
        self.assertEqual(ran.returncode, 0, ran.stderr)
        self.assertEqual(ran.stdout, "%d\n" % (3 << 20))
        self.assertNotIn("bytes", ran.stderr)

    def test_json_output(self):
        out = self.out_dir()
        done = self.run_code("import sys, matplotlib.pyplot as plt\nprint('a')\nprint('b', file=sys.stderr)\n"
                             "plt.plot([1])\nplt.show()\n'result'", "--json", "--out-dir", out)
        self.assertEqual(done.returncode, 0, done.stderr)
        result = json.loads(done.stdout)
        self.assertEqual((result["status"], result["stdout"], result["stderr"], result["results"]),
                         ("ok", "a\n", "b\n", ["'result'"]))
        self.assertEqual(result["images"], [os.path.join(out, "output-1.png")])
        failed = json.loads(self.run_code("1/0", "--json").stdout)
        self.assertEqual((failed["status"], failed["error"]["ename"]), ("error", "ZeroDivisionError"))

    def test_json_output_keeps_every_mime_type(self):
        done = self.run_code("from IPython.display import HTML\ndisplay(HTML('<b>x</b>'))\n'r'", "--json")
        self.assertEqual(done.returncode, 0, done.stderr)
        outputs = json.loads(done.stdout)["outputs"]
        self.assertEqual([o["type"] for o in outputs], ["display_data", "execute_result"])
        self.assertEqual(outputs[0]["data"]["text/html"], "<b>x</b>")
        self.assertEqual(outputs[1]["data"], {"text/plain": "'r'"})

    def test_the_kernel_keeps_its_files_out_of_the_work_dir(self):
        done = self.run_code("import os, IPython, matplotlib.pyplot as plt\nplt.plot([1]); plt.savefig('/tmp/p.png'); plt.close()\n"
                             "print(sorted(n for n in os.listdir('/workspace') if n.startswith('.')))\n"
                             "print(os.path.expanduser('~'))")
        self.assertEqual(done.returncode, 0, done.stderr)
        dotfiles, home = done.stdout.splitlines()
        self.assertEqual(dotfiles, "[]")
        self.assertEqual(home, "/run/gpubox/kernel-home")

    def test_rpc_prints_what_a_streaming_method_streams(self):
        done = self.cli("rpc", self.id, "proc.spawn", '{"argv": ["echo", "hi"]}')
        self.assertEqual(done.returncode, 0, done.stderr)
        lines = done.stdout.splitlines()
        items = [json.loads(line) for line in lines if line.startswith("{") and line.endswith("}")]
        self.assertIn({"stream": "stdout", "attachments": ["hi\n"]}, items)

    def test_timeout_interrupts_the_cell(self):
        started = time.monotonic()
        done = self.run_code("import time\ntime.sleep(60)", "--timeout", "1")
        self.assertLess(time.monotonic() - started, 30)
        self.assertEqual(done.returncode, 1)
        self.assertIn("KeyboardInterrupt", done.stderr)
        self.assertIn("ran past --timeout", done.stderr)

    def test_a_crash_restarts_the_kernel_with_its_models(self):
        done = self.run_code("import os\nos._exit(3)")
        self.assertEqual(done.returncode, 1)
        self.assertIn("restarted", done.stderr)
        after = self.run_code("print(model.fc.in_features, secret.fc.out_features)")
        self.assertEqual((after.returncode, after.stdout), (0, "4 3\n"), after.stderr)

    def test_ctrl_c_interrupts_the_cell(self):
        process = subprocess.Popen([CLI, "run-code", self.id, "import time\nprint('sleeping', flush=True)\ntime.sleep(60)"],
                                   env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            self.assertEqual(process.stdout.readline(), "sleeping\n")
            started = time.monotonic()
            process.send_signal(signal.SIGINT)
            _, err = process.communicate(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        self.assertLess(time.monotonic() - started, 10)
        self.assertEqual(process.returncode, 1)
        self.assertIn("KeyboardInterrupt", err)
        self.assertEqual(self.run_code("print('alive')").stdout, "alive\n", "the kernel is idle again")

    def test_an_unreachable_sandbox_exits_3(self):
        other = self.cli("--json", "create")
        self.assertEqual(other.returncode, 0, other.stderr)
        other_id = json.loads(other.stdout)["id"]
        info = json.loads(self.cli("info", other_id, "--json").stdout)
        os.kill(info["agent_pid"], signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            reap_orphans()
            try:
                os.kill(info["agent_pid"], 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        done = self.cli("run-code", other_id, "1")
        self.assertEqual(done.returncode, 3, done.stderr)
        self.assertIn("gpubox run-code:", done.stderr)

    def test_usage_errors_exit_2(self):
        for args in (["run-code"], ["run-code", self.id, "1", "2"], ["run-code", self.id, "1", "--timeout", "x"],
                     ["run-code", "no-such-sandbox", "1"]):
            done = self.cli(*args)
            self.assertEqual(done.returncode, 2, (args, done.stdout, done.stderr))
            self.assertIn("gpubox run-code:", done.stderr)

    def test_the_hidden_model_is_loaded_and_never_named(self):
        done = self.run_code("import torch\nprint(tuple(secret(torch.ones(1, 4)).shape))\nprint(model_info)")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertTrue(done.stdout.startswith("(1, 3)\nPre-loaded Models:\n"), done.stdout)
        self.assertIn("- secret: hidden model (torchscript)", done.stdout)
        info = self.cli("rpc", self.id, "kernel.info")
        self.assertEqual(info.returncode, 0, info.stderr)
        models = {m["var_name"]: m for m in json.loads(info.stdout)["models"]}
        self.assertEqual(models["secret"]["status"], "loaded", models["secret"])
        self.assertEqual(models["secret"]["parameters"], 15)
        self.assertNotIn("name", models["secret"])
        self.assertEqual(models["model"]["name"], "tiny")
        sys_info = self.cli("rpc", self.id, "sys.info")
        for shown in (done.stdout, info.stdout, sys_info.stdout):
            self.assertNotIn(HIDDEN_NAME, shown)
        # What the loader opened: a read-only file under the agent's state dir, named at random.
        where = self.run_code("import gc, os\n"
                              "paths = [p for p in os.listdir('/run/gpubox/models')]\n"
                              "print(len(paths), len(paths[0]))\n"
                              "p = '/run/gpubox/models/' + paths[0]\n"
                              "try:\n    open(p, 'ab')\nexcept OSError as e:\n    print(type(e).__name__)")
        self.assertEqual(where.stdout, "1 32\nOSError\n", where.stderr)


if __name__ == "__main__":
    unittest.main()
