"""include_layers.py: the real tree's arrows all go downward (between folders,
between the rooms of agent/, host/ and model/modeld/, between the layers of
python/gpubox), and an upward include or import planted in a copy is found and named."""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKER = os.path.join(HERE, "include_layers.py")
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import include_layers  # noqa: E402

COPIED = ["base", "rpc", "hooks", "model", "kernel", "agent", "host", "python"]


def check(root):
    return subprocess.run([sys.executable, CHECKER, root, "--list"], capture_output=True, text=True, timeout=60)


def write(root, path, text):
    full = os.path.join(root, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w") as f:
        f.write(text)


def append(root, path, text):
    with open(os.path.join(root, path), "a") as f:
        f.write(text)


class IncludeLayersTest(unittest.TestCase):
    def test_the_checkout_has_no_upward_arrow(self):
        result = check(ROOT)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn("rpc     -> base", result.stdout)
        for heading in ("rooms of model/modeld/, lowest first: config gpu split decoder",
                        "rooms of agent/, lowest first: .", "rooms of host/, lowest first: .",
                        "layers of python/gpubox/, lowest first: wire"):
            self.assertIn(heading, result.stdout)
        self.assertIn("  methods       -> registry ", result.stdout)
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


class RoomsInACopyTest(unittest.TestCase):
    """Each test plants one arrow in a copy of the real tree; the copy as it is passes."""

    def setUp(self):
        self.root = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.root)
        ignore = shutil.ignore_patterns("__pycache__", "node_modules", "*.pyc")
        for folder in COPIED:
            shutil.copytree(os.path.join(ROOT, folder), os.path.join(self.root, folder), ignore=ignore)

    def test_the_copy_passes(self):
        result = check(self.root)
        self.assertEqual(result.returncode, 0, result.stderr)

    def test_an_upward_include_between_rooms_of_modeld_is_named(self):
        append(self.root, "model/modeld/gpu/gpu_info.cpp", '#include "model/modeld/methods/methods.h"\n')
        result = check(self.root)
        self.assertEqual(result.returncode, 1)
        self.assertIn("  gpu           -> methods          1  UPWARD", result.stdout)
        self.assertIn("model/modeld/gpu/gpu_info.cpp includes model/modeld/methods/ (a higher room)", result.stderr)

    def test_an_upward_include_from_the_ground_floor_is_named(self):
        append(self.root, "agent/process_table.cpp", '#include "agent/jobs/job_manager.h"\n')
        append(self.root, "host/budget/ledger.cpp", '#include "host/cli/cli.h"\n')
        result = check(self.root)
        self.assertEqual(result.returncode, 1)
        self.assertIn("agent/process_table.cpp includes agent/jobs/ (a higher room)", result.stderr)
        self.assertIn("host/budget/ledger.cpp includes host/cli/ (a higher room)", result.stderr)

    def test_a_known_upward_include_is_printed_and_one_that_is_gone_must_leave_the_list(self):
        append(self.root, "agent/log.cpp", '#include "agent/jobs/job_manager.h"\n')
        known = {("agent/log.cpp", "jobs"): "planted", ("agent/config.cpp", "jobs"): "gone"}
        code = ("import sys; sys.path.insert(0, %r); import include_layers as c; c.KNOWN_UPWARD.update(%r); "
                "sys.exit(c.main(['include_layers.py', %r, '--list']))" % (HERE, known, self.root))
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 1)
        self.assertIn("  .             -> jobs             1  known upward: agent/log.cpp", result.stdout)
        self.assertNotIn("agent/log.cpp includes", result.stderr)
        self.assertIn("agent/config.cpp no longer includes jobs/: take it out of KNOWN_UPWARD", result.stderr)

    def test_an_upward_python_import_is_named(self):
        append(self.root, "python/gpubox/errors.py", "\n\ndef _late():\n    from .client import Client\n    return Client\n")
        result = check(self.root)
        self.assertEqual(result.returncode, 1)
        self.assertIn("  wire          -> client           1  UPWARD", result.stdout)
        self.assertRegex(result.stderr, r"python/gpubox/errors.py:\d+ imports client \(layer client, above wire\)")

    def test_a_python_module_in_no_layer_is_named(self):
        write(self.root, "python/gpubox/stray.py", "from . import client\n")
        result = check(self.root)
        self.assertEqual(result.returncode, 1)
        self.assertIn("python/gpubox/stray.py is in no layer", result.stderr)


if __name__ == "__main__":
    unittest.main()
