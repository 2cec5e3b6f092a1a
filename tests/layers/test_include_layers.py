"""include_layers.py: the real tree's arrows all go downward, and an upward or
sideways include in a made-up tree is found and named."""

import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKER = os.path.join(HERE, "include_layers.py")
ROOT = os.path.dirname(os.path.dirname(HERE))


def check(root):
    return subprocess.run([sys.executable, CHECKER, root], capture_output=True, text=True, timeout=60)


def write(root, path, text):
    full = os.path.join(root, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w") as f:
        f.write(text)


class IncludeLayersTest(unittest.TestCase):
    def test_the_checkout_has_no_upward_arrow(self):
        result = check(ROOT)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn("rpc     -> base", result.stdout)
        self.assertNotIn("UPWARD", result.stdout)

    def test_upward_and_sideways_includes_are_named(self):
        with tempfile.TemporaryDirectory() as root:
            write(root, "base/status.h", "#pragma once\n")
            write(root, "rpc/server.cpp", '#include "base/status.h"\n')
            write(root, "kernel/interp.cpp", '#include "agent/version.h"\n')
            write(root, "host/snapshot.cpp", '#include "agent/jobs/stager.h"\n')
            write(root, "kernel/CMakeLists.txt", "file(GLOB x ${CMAKE_SOURCE_DIR}/host/python/*.py)\n")
            result = check(root)
        self.assertEqual(result.returncode, 1)
        self.assertIn("rpc     -> base       1\n", result.stdout)
        for line in ("kernel/interp.cpp includes agent/", "host/snapshot.cpp includes agent/",
                     "kernel/CMakeLists.txt includes host/"):
            self.assertIn(line, result.stderr)
        self.assertNotIn("rpc/server.cpp", result.stderr)


if __name__ == "__main__":
    unittest.main()
