"""Every output reaches the client, in order, none dropped: print, sys.stdout and
sys.stderr, os.write to fds 1 and 2, subprocesses and C-level writes; 20,000
one-line prints and one 100 MB write arrive complete before idle."""
import time
import unittest

from kernel_harness import KernelTestCase


class OutputCompletenessTest(KernelTestCase):
    def test_twenty_thousand_prints_arrive_in_order(self):
        start = time.monotonic()
        cell = self.execute("for i in range(20000): print(i)")
        elapsed = time.monotonic() - start
        self.assertEqual(cell.content["status"], "ok")
        self.assertEqual(cell.stream(), "".join("%d\n" % i for i in range(20000)))
        self.assertLess(len(cell.of_type("stream")), 20000, "small writes are coalesced")
        print("\n20,000 prints: %.3f s, %d stream messages" % (elapsed, len(cell.of_type("stream"))))

    def test_one_hundred_megabyte_write(self):
        size = 100 * 1024 * 1024
        start = time.monotonic()
        cell = self.execute("import sys; sys.stdout.write('x' * %d + 'END')" % size, timeout=300)
        elapsed = time.monotonic() - start
        self.assertEqual(cell.content["status"], "ok")
        text = cell.stream()
        self.assertEqual(len(text), size + 3)
        self.assertTrue(text.endswith("xEND"))
        self.assertEqual(text.count("x"), size)
        print("\n100 MB write: %.2f s (%.0f MB/s), %d stream messages"
              % (elapsed, 100 / elapsed, len(cell.of_type("stream"))))

    def test_fd_level_writes_and_subprocesses_are_captured(self):
        cell = self.execute(
            "import os, subprocess, ctypes\n"
            "os.write(1, b'fd1\\n')\n"
            "os.write(2, b'fd2\\n')\n"
            "subprocess.run(['sh', '-c', 'echo from-child; echo child-err >&2'])\n"
            "libc = ctypes.CDLL(None); libc.puts(b'from-c'); libc.fflush(None)\n"
            "!echo from-bang\n")
        self.assertEqual(cell.content["status"], "ok")
        self.assertEqual(cell.stream("stdout"), "fd1\nfrom-child\nfrom-c\nfrom-bang\n")
        self.assertEqual(cell.stream("stderr"), "fd2\nchild-err\n")

    def test_output_order_between_streams_and_rich_output(self):
        cell = self.execute(
            "from IPython.display import display\n"
            "print('before')\n"
            "display({'a': 1}, raw=True)\n"
            "print('after')\n"
            "'result'")
        kinds = [(m["msg_type"], m["content"].get("text")) for m in cell.messages if m["msg_type"] not in ("execute_input", "status")]
        self.assertEqual(kinds, [("stream", "before\n"), ("display_data", None), ("stream", "after\n"),
                                 ("execute_result", None)])

    def test_non_utf8_and_split_multibyte_output(self):
        cell = self.execute("import os, sys\n"
                            "data = 'é€😀'.encode()\n"
                            "for b in data: os.write(1, bytes([b]))\n"
                            "os.write(1, b'\\n\\xff\\n')")
        self.assertEqual(cell.content["status"], "ok")
        self.assertTrue(cell.stream().startswith("é€😀\n"))
        self.assertEqual(len(cell.stream()), 6, "an invalid byte becomes one replacement character")


if __name__ == "__main__":
    unittest.main()
