"""lock_types.py: the real tree takes every lock through the annotated
wrappers, and a raw std::mutex in a made-up tree is named, unless its line
says why it is an exception."""

import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKER = os.path.join(HERE, "lock_types.py")
ROOT = os.path.dirname(os.path.dirname(HERE))


sys.path.insert(0, HERE)
from test_include_layers import write  # noqa: E402  (the made-up trees' writer; only the function)


def check(root):
    return subprocess.run([sys.executable, CHECKER, root], capture_output=True, text=True, timeout=60)


class LockTypesTest(unittest.TestCase):
    def test_the_checkout_has_no_lock_the_analysis_cannot_see(self):
        result = check(ROOT)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

    def test_a_raw_lock_is_named_unless_its_line_says_why(self):
        with tempfile.TemporaryDirectory() as root:
            write(root, "base/thread_annotations.h", "std::mutex mutex_;\n")
            write(root, "kernel/a.h", "#include <mutex>\nstd::mutex m_;  // guards x_\n")
            write(root, "host/b.cpp", "void f() { std::lock_guard lock(m_); }\n")
            write(root, "rpc/c.cpp", "static std::mutex m;  // thread-safety exception: a signal handler's\n")
            write(root, "agent/d.cpp", "// std::mutex is not used here\nint x;\n")
            result = check(root)
        self.assertEqual(result.returncode, 1)
        self.assertEqual(result.stdout.splitlines(),
                         ["host/b.cpp:1: void f() { std::lock_guard lock(m_); }",
                          "kernel/a.h:2: std::mutex m_;  // guards x_"])
        self.assertIn("gpubox::Mutex", result.stderr)


if __name__ == "__main__":
    unittest.main()
