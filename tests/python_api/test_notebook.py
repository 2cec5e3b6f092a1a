"""gpubox.NotebookSession on a real local sandbox's kernel: a Workspace's libraries
(from a file, a directory, inline) imported, again after a kernel crash and a
restart; the hidden setup cell (custom_init_code) in no history and no output;
streams, results, images, errors and execution counts; the streaming callbacks
called while the cell runs; timeout, interrupt from another thread, exec_file;
nbclient driving the same kernel through connection_file(); model_info_text
and mcp_config. One sandbox and one session serve the whole class.

Run by ctest (python_api_notebook) with Debian's /usr/bin/python3 (jupyter_client,
nbclient, matplotlib), which is also the kernel's python; needs root and GPUBOX_CLI.
"""
import os
import threading
import time
import unittest

import gpubox
from local_sandboxes import PrivateState, require_root_and_cli

PYTHON = "/usr/bin/python3"
SETUP_CODE = "HIDDEN_SETUP_VALUE = 'setup-ran'\nprint('setup output is never shown')\n"
state = None


def setUpModule():
    global state
    require_root_and_cli()
    state = PrivateState("gpubox-py-notebook-")


def tearDownModule():
    if state is not None:
        state.end()


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


class NotebookTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        root = os.path.join(state.root, "libs")
        write(os.path.join(root, "tools.py"), '"""Helper tools."""\ndef answer():\n    return 42\n')
        write(os.path.join(root, "analysis", "__init__.py"), '"""Analysis helpers."""\nNAME = "analysis"\n')
        write(os.path.join(root, "analysis", "sub.py"), "def g():\n    return 'sub'\n")
        cls.workspace = gpubox.Workspace(
            libraries=[gpubox.Library.from_file(os.path.join(root, "tools.py")),
                       gpubox.Library.from_directory(os.path.join(root, "analysis")),
                       gpubox.Library("inline", {"inline.py": "X = 5\n"}, docs="An inline library.")],
            custom_init_code=SETUP_CODE)
        cls.box = gpubox.Sandbox(gpubox.SandboxConfig(python=PYTHON, timeout=600)).start(name="py-notebook")
        cls.session = gpubox.create_notebook_session(cls.box, cls.workspace)

    @classmethod
    def tearDownClass(cls):
        cls.box.terminate()

    def exec(self, code, **options):
        ran = self.session.exec(code, **options)
        self.assertIsNone(ran.error, ran.error)
        return ran

    def assert_workspace_is_set_up(self):
        ran = self.exec("import tools, analysis, inline\nfrom analysis import sub\n"
                        "print(tools.answer(), analysis.NAME, sub.g(), inline.X, HIDDEN_SETUP_VALUE)")
        self.assertEqual(ran.stdout, "42 analysis sub 5 setup-ran\n")

    def test_libraries_import(self):
        self.assert_workspace_is_set_up()
        self.assertEqual(self.exec("import tools; tools.__file__").text, "'/workspace/libraries/tools.py'")
        self.assertIn("## tools\n\nHelper tools.", self.workspace.get_library_docs())
        self.assertIn("## analysis\n\nAnalysis helpers.", self.workspace.get_library_docs())
        self.assertTrue(self.workspace.libraries[0].is_single_file)
        self.assertFalse(self.workspace.libraries[1].is_single_file)

    def test_a_workspace_added_later(self):
        data = os.path.join(state.root, "data.txt")
        write(data, "workspace data")
        self.session.setup(gpubox.Workspace(libraries=[gpubox.Library("late", {"late.py": "V = 'late'"})],
                                            local_files=[(data, "inputs/data.txt")]))
        self.assertEqual(self.exec("import late; late.V").text, "'late'")
        self.assertEqual(self.exec("open('/workspace/inputs/data.txt').read()").text, "'workspace data'")

    def test_the_setup_cell_is_hidden(self):
        ran = self.exec("needle = 'HIDDEN_SETUP_VALUE ' + '='\n[c for c in In if needle in c], HIDDEN_SETUP_VALUE")
        self.assertEqual(ran.text, "([], 'setup-ran')")
        self.assertNotIn("setup output", ran.stdout)
        before = self.exec("1").execution_count
        hidden = self.exec("hidden_var = 'h'\nprint('hidden printed')", hidden=True)
        self.assertIsNone(hidden.execution_count)
        self.assertEqual(hidden.stdout, "hidden printed\n", "the caller still gets a hidden cell's output")
        after = self.exec("needle = 'hidden_var ' + '='\n[c for c in In if needle in c], hidden_var")
        self.assertEqual(after.text, "([], 'h')")
        self.assertEqual(after.execution_count, before + 1, "a hidden cell takes no count")

    def test_outputs(self):
        ran = self.exec("import sys\nprint('to stdout')\nprint('to stderr', file=sys.stderr)\n"
                        "from IPython.display import display, HTML\ndisplay(HTML('<b>bold</b>'))\n"
                        "import matplotlib\nmatplotlib.use('agg')\nimport matplotlib.pyplot as plt\n"
                        "plt.plot([1, 3, 2])\nplt.show()\n6 * 7")
        self.assertEqual((ran.stdout, ran.stderr, ran.text), ("to stdout\n", "to stderr\n", "42"))
        self.assertEqual(ran.results[0]["text/html"], "<b>bold</b>")
        self.assertEqual(len(ran.images), 1)
        self.assertTrue(ran.images[0].startswith(b"\x89PNG\r\n\x1a\n"))
        self.assertEqual(ran.results[-1], {"text/plain": "42"})
        self.assertTrue(ran.success)
        failed = self.session.exec("def f():\n    return 1 / 0\nf()")
        self.assertFalse(failed.success)
        self.assertEqual((failed.error.name, failed.error.value), ("ZeroDivisionError", "division by zero"))
        self.assertTrue(any("ZeroDivisionError" in line for line in failed.error.traceback))
        self.assertEqual(failed.execution_count, ran.execution_count + 1)

    def test_callbacks_stream_while_the_cell_runs(self):
        seen = []
        stamp = lambda kind: (lambda value: seen.append((kind, value, time.monotonic())))
        ran = self.session.exec("import sys, time\nprint('early', flush=True)\nprint('warn', file=sys.stderr, flush=True)\n"
                                "display({'text/plain': 'shown'}, raw=True)\ntime.sleep(2)\nprint('late')\n1/0",
                                on_stdout=stamp("out"), on_stderr=stamp("err"), on_result=stamp("result"),
                                on_error=stamp("error"))
        ended = time.monotonic()
        self.assertEqual([(k, v if k != "error" else v.name) for k, v, _ in seen],
                         [("out", "early\n"), ("err", "warn\n"), ("result", {"text/plain": "shown"}),
                          ("out", "late\n"), ("error", "ZeroDivisionError")])
        self.assertGreater(ended - seen[0][2], 1.5, "'early' arrived while the cell still ran")

    def test_timeout(self):
        started = time.monotonic()
        ran = self.session.exec("import time\ntime.sleep(60)", timeout=1)
        self.assertTrue(ran.timed_out)
        self.assertEqual(ran.error.name, "KeyboardInterrupt")
        self.assertLess(time.monotonic() - started, 30)
        self.assertEqual(self.exec("'still alive'").text, "'still alive'")

    def test_interrupt_from_another_thread(self):
        self.assertFalse(self.session.interrupt(), "nothing runs")
        answers = []
        timer = threading.Timer(1.0, lambda: answers.append(self.session.interrupt()))
        timer.start()
        started = time.monotonic()
        ran = self.session.exec("import time\ntime.sleep(60)")
        timer.join()
        self.assertEqual((answers, ran.error.name), ([True], "KeyboardInterrupt"))
        self.assertLess(time.monotonic() - started, 30)

    def test_exec_file(self):
        path = os.path.join(state.root, "script.py")
        write(path, "total = sum(range(10))\nprint('total', total)\n")
        self.assertEqual(self.session.exec_file(path).stdout, "total 45\n")

    def test_z_a_crash_then_a_restart_keep_the_workspace(self):
        self.exec("doomed = 1")
        crashed = self.session.exec("import os\nos._exit(1)")
        self.assertTrue(crashed.died)
        self.assertFalse(crashed.success)
        gone = self.session.exec("doomed")
        self.assertEqual(gone.error.name, "NameError", "a fresh kernel")
        self.assert_workspace_is_set_up()
        self.exec("doomed = 2")
        self.session.restart()
        gone = self.session.exec("doomed")
        self.assertEqual((gone.error.name, gone.execution_count), ("NameError", 1), "a fresh kernel, its count anew")
        self.assert_workspace_is_set_up()

    def test_nbclient_through_the_connection_file(self):
        import nbformat
        from jupyter_client import BlockingKernelClient
        from nbclient import NotebookClient
        path = self.session.connection_file()
        self.assertEqual(self.session.connection_file(), path, "one relay per session")
        self.exec("SHARED = 'set through RPC'")
        kc = BlockingKernelClient(connection_file=path)
        kc.load_connection_file()
        kc.start_channels()
        try:
            kc.wait_for_ready(timeout=60)
            nb = nbformat.v4.new_notebook()
            nb.cells = [nbformat.v4.new_code_cell("print(SHARED)\nimport tools\ntools.answer()"),
                        nbformat.v4.new_code_cell("raise ValueError('expected')")]
            client = NotebookClient(nb, timeout=60, allow_errors=True)
            client.kc = kc
            client.reset_execution_trackers()
            for index, cell in enumerate(nb.cells):
                client.execute_cell(cell, index)
        finally:
            kc.stop_channels()
        first, second = nb.cells
        self.assertEqual([(o.output_type, o.get("text")) for o in first.outputs if o.output_type == "stream"],
                         [("stream", "set through RPC\n")])
        self.assertEqual([o.data["text/plain"] for o in first.outputs if o.output_type == "execute_result"], ["42"])
        self.assertEqual([(o.ename, o.evalue) for o in second.outputs], [("ValueError", "expected")])
        nbformat.validate(nb)
        self.session.close()
        self.assertFalse(os.path.exists(path), "the relay removed its connection file")

    def test_model_info_and_mcp_config(self):
        self.assertEqual(self.session.model_info_text, "Pre-loaded Models: none")
        self.assertEqual(self.session.session_id, self.box.sandbox_id)
        self.assertEqual(self.session.mcp_config, {"mcpServers": {"gpubox": {
            "command": os.path.abspath(os.environ["GPUBOX_CLI"]), "args": ["mcp", "--sandbox", self.box.sandbox_id]}}})


class ConnectedSandboxTest(unittest.TestCase):
    def test_libraries_import_in_a_sandbox_made_by_the_cli_and_connected(self):
        created = gpubox.sandbox.run_cli("create", "--name", "py-connected")  # no kernel.workspace_dir
        box = gpubox.Sandbox.connect(created["id"])
        try:
            session = gpubox.create_notebook_session(
                box, gpubox.Workspace(libraries=[gpubox.Library("steering_lib", {"steering_lib.py": "SCALE = 4\n"})]))
            ran = session.exec("import steering_lib\nprint(steering_lib.SCALE)")
            self.assertIsNone(ran.error, ran.error)
            self.assertEqual(ran.stdout, "4\n")
            session.restart()
            again = session.exec("import steering_lib\nprint(steering_lib.SCALE * 2)")
            self.assertIsNone(again.error, again.error)
            self.assertEqual(again.stdout, "8\n")
        finally:
            box.terminate()


class FailingSetupTest(unittest.TestCase):
    def test_init_code_that_raises_is_reported(self):
        with gpubox.Sandbox(gpubox.SandboxConfig(python=PYTHON)) as box:
            with self.assertRaisesRegex(gpubox.SandboxError, "custom_init_code failed: NameError"):
                gpubox.create_notebook_session(box, gpubox.Workspace(custom_init_code="undefined_name"))


class ModelTheKernelCannotLoadTest(unittest.TestCase):
    def test_create_notebook_session_names_the_model_and_what_to_do(self):
        model = os.path.join(state.root, "models", "tiny")
        write(os.path.join(model, "config.json"), '{"model_type": "llama"}\n')
        config = gpubox.SandboxConfig(python=PYTHON, models=[gpubox.ModelConfig("acme/tiny", path=model)])
        with gpubox.Sandbox(config) as box:  # Debian's python3 has no torch nor transformers
            with self.assertRaises(gpubox.SandboxError) as raised:
                gpubox.create_notebook_session(box)
        message = str(raised.exception)
        self.assertIn("the kernel could not load a model:\n  acme/tiny: ", message)
        self.assertIn("torch", message)
        self.assertIn("The kernel runs /usr/bin/python3", message)
        self.assertIn("SandboxConfig(python=...)", message)


if __name__ == "__main__":
    unittest.main()
