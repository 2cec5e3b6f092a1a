"""Message semantics a JupyterLab or VS Code user expects of ipykernel, driven by
jupyter_client against the real gpubox kernel."""
import base64
import time
import unittest

from jupyter_client.manager import start_new_kernel

from kernel_harness import KERNEL_NAME, TIMEOUT, KernelTestCase, require_kernelspec

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class ExecuteTest(KernelTestCase):
    def test_execute_result_and_counts(self):
        first = self.execute("6 * 7")
        second = self.execute("_ + 1")
        self.assertEqual(first.of_type("execute_result")[0]["content"]["data"]["text/plain"], "42")
        self.assertEqual(second.of_type("execute_result")[0]["content"]["data"]["text/plain"], "43")
        self.assertEqual(second.content["execution_count"], first.content["execution_count"] + 1)
        self.assertEqual(second.of_type("execute_result")[0]["content"]["execution_count"],
                         second.content["execution_count"])
        out = self.execute("Out[%d]" % first.content["execution_count"])
        self.assertEqual(out.of_type("execute_result")[0]["content"]["data"]["text/plain"], "42")

    def test_silent_execution_publishes_nothing_and_keeps_the_count(self):
        before = self.execute("1").content["execution_count"]
        silent = self.execute("print('hidden'); 5", silent=True, store_history=False)
        self.assertEqual(silent.content["status"], "ok")
        self.assertEqual([m["msg_type"] for m in silent.messages if m["msg_type"] != "status"], [])
        after = self.execute("2").content["execution_count"]
        self.assertEqual(after, before + 1)

    def test_error_has_ename_evalue_and_a_clean_traceback(self):
        cell = self.execute("def inner():\n    raise KeyError('missing')\ninner()")
        self.assertEqual(cell.content["status"], "error")
        self.assertEqual(cell.content["ename"], "KeyError")
        self.assertEqual(cell.content["evalue"], "'missing'")
        errors = cell.of_type("error")
        self.assertEqual(len(errors), 1)
        traceback = "\n".join(errors[0]["content"]["traceback"])
        self.assertIn("inner", traceback)
        self.assertNotIn("gpubox-executor", traceback)
        self.assertNotIn("executor.py", traceback)

    def test_syntax_error(self):
        cell = self.execute("def broken(:\n  pass")
        self.assertEqual(cell.content["status"], "error")
        self.assertEqual(cell.content["ename"], "SyntaxError")

    def test_display_data_carries_every_mime_type(self):
        cell = self.execute(
            "class Rich:\n"
            "    def _repr_html_(self): return '<i>rich</i>'\n"
            "    def _repr_markdown_(self): return '*rich*'\n"
            "    def __repr__(self): return 'Rich()'\n"
            "display(Rich())\n")
        data = cell.of_type("display_data")[0]["content"]["data"]
        self.assertEqual(data["text/html"], "<i>rich</i>")
        self.assertEqual(data["text/markdown"], "*rich*")
        self.assertEqual(data["text/plain"], "Rich()")

    def test_matplotlib_figure_is_a_png(self):
        cell = self.execute(
            "import matplotlib.pyplot as plt\n"
            "plt.plot([1, 2, 3], [3, 1, 2])\n"
            "plt.show()\n", timeout=120)
        self.assertEqual(cell.content["status"], "ok")
        images = [m for m in cell.of_type("display_data") if "image/png" in m["content"]["data"]]
        self.assertEqual(len(images), 1)
        self.assertTrue(base64.b64decode(images[0]["content"]["data"]["image/png"]).startswith(PNG_MAGIC))
        self.assertEqual(cell.stream("stderr"), "", "no backend warning")

    def test_update_display_data(self):
        cell = self.execute(
            "handle = display('first', display_id=True)\n"
            "handle.update('second')\n")
        shown = cell.of_type("display_data")[0]["content"]
        updated = cell.of_type("update_display_data")[0]["content"]
        self.assertEqual(shown["data"]["text/plain"], "'first'")
        self.assertEqual(updated["data"]["text/plain"], "'second'")
        self.assertEqual(shown["transient"]["display_id"], updated["transient"]["display_id"])

    def test_clear_output(self):
        cell = self.execute("from IPython.display import clear_output\nprint('a')\nclear_output(wait=True)\nprint('b')")
        kinds = [m["msg_type"] for m in cell.messages if m["msg_type"] in ("stream", "clear_output")]
        self.assertEqual(kinds, ["stream", "clear_output", "stream"])
        self.assertTrue(cell.of_type("clear_output")[0]["content"]["wait"])

    def test_input_through_stdin(self):
        prompts = []

        def answer(request):
            prompts.append((request["content"]["prompt"], request["content"]["password"]))
            return "gpubox" if not request["content"]["password"] else "secret"

        cell = self.execute("import getpass\nname = input('name? ')\npw = getpass.getpass('pw? ')\nprint(name, pw)",
                            allow_stdin=True, stdin_handler=answer)
        self.assertEqual(cell.content["status"], "ok")
        self.assertEqual(prompts, [("name? ", False), ("pw? ", True)])
        self.assertEqual(cell.stream(), "gpubox secret\n")

    def test_input_without_stdin_is_a_clear_error(self):
        cell = self.execute("input('x')", allow_stdin=False)
        self.assertEqual(cell.content["status"], "error")
        self.assertEqual(cell.content["ename"], "StdinNotImplementedError")
        self.assertIn("allow_stdin", cell.content["evalue"])

    def test_magics_and_shell_commands(self):
        cell = self.execute("%time x = sum(range(10))\n!echo from-shell")
        self.assertEqual(cell.content["status"], "ok")
        self.assertIn("from-shell\n", cell.stream())
        self.assertIn("Wall time", cell.stream())


class IntrospectionTest(KernelTestCase):
    def request(self, send, reply_type):
        msg_id = send()
        reply = self.kc.get_shell_msg(timeout=TIMEOUT)
        self.assertEqual(reply["parent_header"]["msg_id"], msg_id)
        self.assertEqual(reply["msg_type"], reply_type)
        return reply["content"]

    def test_complete_names_defined_by_earlier_cells(self):
        self.execute("gpubox_value = 1\ngpubox_other = 2")
        reply = self.request(lambda: self.kc.complete("gpubox_v", 8), "complete_reply")
        self.assertEqual(reply["status"], "ok")
        self.assertEqual(reply["matches"], ["gpubox_value"])
        self.assertEqual((reply["cursor_start"], reply["cursor_end"]), (0, 8))

    def test_complete_attributes(self):
        reply = self.request(lambda: self.kc.complete("import os; os.pat", 17), "complete_reply")
        self.assertIn("path", reply["matches"])
        self.assertEqual(reply["cursor_start"], 14)

    def test_inspect(self):
        self.execute("def documented(a, b):\n    'Adds a and b.'\n    return a + b")
        reply = self.request(lambda: self.kc.inspect("documented(", 3), "inspect_reply")
        self.assertTrue(reply["found"])
        self.assertIn("Adds a and b.", reply["data"]["text/plain"])
        missing = self.request(lambda: self.kc.inspect("no_such_name_here", 5), "inspect_reply")
        self.assertFalse(missing["found"])

    def test_is_complete(self):
        cases = {"x = 1": "complete", "for i in range(3):": "incomplete", "x = = 2": "invalid"}
        for code, status in cases.items():
            reply = self.request(lambda code=code: self.kc.is_complete(code), "is_complete_reply")
            self.assertEqual(reply["status"], status, code)
        reply = self.request(lambda: self.kc.is_complete("if True:"), "is_complete_reply")
        self.assertEqual(reply["indent"], "    ")

    def test_history_rows_are_integer_triples(self):
        self.execute("'history one'")
        last = self.execute("'history two'")
        reply = self.request(lambda: self.kc.history(hist_access_type="tail", n=2, raw=True, output=False),
                             "history_reply")
        rows = reply["history"]
        self.assertEqual([row[2] for row in rows], ["'history one'", "'history two'"])
        for session, line, text in rows:
            self.assertIsInstance(session, int)
            self.assertIsInstance(line, int)
        self.assertEqual(rows[-1][1], last.content["execution_count"])

    def test_comm_info(self):
        reply = self.request(lambda: self.kc.comm_info(), "comm_info_reply")
        self.assertEqual(reply["status"], "ok")
        self.assertEqual(reply["comms"], {})

    def test_kernel_info(self):
        reply = self.request(lambda: self.kc.kernel_info(), "kernel_info_reply")
        self.assertEqual(reply["implementation"], "gpubox")
        self.assertEqual(reply["protocol_version"].split(".")[0], "5")
        self.assertEqual(reply["language_info"]["name"], "python")
        self.assertEqual(reply["language_info"]["file_extension"], ".py")
        self.assertRegex(reply["language_info"]["version"], r"^3\.\d+")


class LifecycleTest(unittest.TestCase):
    def setUp(self):
        require_kernelspec()

    def test_restart_gives_a_fresh_kernel(self):
        km, kc = start_new_kernel(kernel_name=KERNEL_NAME, startup_timeout=TIMEOUT)
        try:
            kc.execute_interactive("kept = 1", timeout=TIMEOUT)
            km.restart_kernel(now=False)
            kc.wait_for_ready(timeout=TIMEOUT)
            old_pid = km.provisioner.process.pid if km.provisioner else None
            results = []
            reply = kc.execute_interactive(
                "'kept' in globals()", timeout=TIMEOUT,
                output_hook=lambda msg: results.append(msg["content"]["data"]["text/plain"])
                if msg["msg_type"] == "execute_result" else None)
            self.assertEqual(reply["content"]["status"], "ok")
            self.assertEqual(results, ["False"])
            self.assertEqual(reply["content"]["execution_count"], 1)
            self.assertIsNotNone(old_pid)
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=True)

    def test_shutdown_request_ends_the_process(self):
        km, kc = start_new_kernel(kernel_name=KERNEL_NAME, startup_timeout=TIMEOUT)
        try:
            kc.execute_interactive("1", timeout=TIMEOUT)
            process = km.provisioner.process
            kc.shutdown()
            reply = kc.get_control_msg(timeout=TIMEOUT) if hasattr(kc, "get_control_msg") else None
            deadline = time.monotonic() + 10
            while process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            self.assertEqual(process.poll(), 0)
            if reply is not None:
                self.assertEqual(reply["msg_type"], "shutdown_reply")
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=True)

    def test_shutdown_ends_a_cell_that_ignores_interrupts(self):
        km, kc = start_new_kernel(kernel_name=KERNEL_NAME, startup_timeout=TIMEOUT)
        try:
            kc.execute_interactive("1", timeout=TIMEOUT)
            process = km.provisioner.process
            kc.execute("import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: pass")
            time.sleep(1)
            kc.shutdown()
            deadline = time.monotonic() + 10
            while process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            self.assertEqual(process.poll(), 0)
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=True)


if __name__ == "__main__":
    unittest.main()
