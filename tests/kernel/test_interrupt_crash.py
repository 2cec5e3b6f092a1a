"""Interrupt (interrupt_request on control, and SIGINT to the kernel process) and
crashes of user code: the kernel process survives and the next cell works."""
import os
import signal
import threading
import time
import unittest

from kernel_harness import KernelTestCase


class InterruptTest(KernelTestCase):
    def interrupt_after(self, delay, how):
        def fire():
            time.sleep(delay)
            if how == "message":
                self.km.interrupt_kernel()  # interrupt_mode "message": interrupt_request on control
            else:
                os.kill(self.km.provisioner.process.pid, signal.SIGINT)
        thread = threading.Thread(target=fire)
        thread.start()
        return thread

    def check_interrupted(self, code, how):
        thread = self.interrupt_after(1.0, how)
        start = time.monotonic()
        cell = self.execute(code, timeout=30)
        elapsed = time.monotonic() - start
        thread.join()
        self.assertEqual(cell.content["status"], "error")
        self.assertEqual(cell.content["ename"], "KeyboardInterrupt")
        self.assertEqual([m["content"]["ename"] for m in cell.of_type("error")], ["KeyboardInterrupt"])
        self.assertLess(elapsed, 2.0, "idle again within 1 s of the interrupt")
        self.assertEqual(self.execute("40 + 2").of_type("execute_result")[0]["content"]["data"]["text/plain"], "42")

    def test_message_interrupts_sleep(self):
        self.check_interrupted("import time; time.sleep(100)", "message")

    def test_message_interrupts_busy_loop(self):
        self.check_interrupted("while True: pass", "message")

    def test_signal_interrupts_sleep(self):
        self.check_interrupted("import time; time.sleep(100)", "signal")

    def test_signal_interrupts_busy_loop(self):
        self.check_interrupted("x = 0\nwhile True: x += 1", "signal")

    def test_interrupt_while_idle_changes_nothing(self):
        self.km.interrupt_kernel()
        os.kill(self.km.provisioner.process.pid, signal.SIGINT)
        time.sleep(0.3)
        cell = self.execute("print('still here')")
        self.assertEqual(cell.content["status"], "ok")
        self.assertEqual(cell.stream(), "still here\n")

    def test_interrupt_during_input(self):
        prompts = []

        def interrupt_instead_of_answering(request):
            prompts.append(request["content"]["prompt"])
            self.km.interrupt_kernel()

        start = time.monotonic()
        cell = self.execute("input('never answered: ')", timeout=30, allow_stdin=True,
                            stdin_handler=interrupt_instead_of_answering)
        self.assertEqual(prompts, ["never answered: "])
        self.assertEqual(cell.content["ename"], "KeyboardInterrupt")
        self.assertLess(time.monotonic() - start, 10)
        self.assertEqual(self.execute("1 + 1").content["status"], "ok")


class CrashTest(KernelTestCase):
    def check_crash(self, code, cause):
        self.execute("survivor = 'set before the crash'")
        pid = self.km.provisioner.process.pid
        cell = self.execute(code, timeout=60)
        self.assertEqual(cell.content["status"], "error")
        self.assertEqual(cell.content["ename"], "KernelRestarted")
        self.assertIn(cause, cell.content["evalue"])
        self.assertIn("restarted", cell.content["evalue"])
        self.assertEqual(len(cell.of_type("error")), 1)
        self.assertTrue(self.km.is_alive())
        self.assertEqual(self.km.provisioner.process.pid, pid, "the kernel process itself survived")
        after = self.execute("print('alive'); 'survivor' in globals()")
        self.assertEqual(after.content["status"], "ok")
        self.assertEqual(after.stream(), "alive\n")
        self.assertEqual(after.of_type("execute_result")[0]["content"]["data"]["text/plain"], "False",
                         "a fresh executor: user state is gone")

    def test_segfault(self):
        self.check_crash("import ctypes; ctypes.string_at(0)", "SIGSEGV")

    def test_os_exit(self):
        self.check_crash("import os; os._exit(3)", "exited with status 3")

    def test_abort(self):
        self.check_crash("import os; os.abort()", "SIGABRT")

    def test_killed_like_oom(self):
        self.check_crash("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", "SIGKILL")

    def test_garbage_on_the_channel_restarts_the_executor(self):
        # User code shares the executor's process: bytes it writes to the
        # private channel (fd 3) must never reach PID 1 as trusted frames.
        self.check_crash("import os; os.write(3, b'\\x00\\x00\\x00\\x05hello')", "channel protocol (not JSON)")

    def test_ill_typed_frame_restarts_the_executor(self):
        code = ("import os, json, struct\n"
                "p = json.dumps({'type': 'input_request', 'prompt': 5}).encode()\n"
                "os.write(3, struct.pack('>I', len(p)) + p)\n")
        self.check_crash(code, 'channel protocol ("prompt" must be a string)')

    def test_output_before_crash_arrives(self):
        cell = self.execute("import os, sys; print('last words'); sys.stdout.flush(); os._exit(1)")
        self.assertEqual(cell.stream(), "last words\n")


if __name__ == "__main__":
    unittest.main()
