"""tests/prerequisite.py: a missing prerequisite that the setup installs skips on a
developer's machine and fails under CI=true."""

import os
import sys
import unittest
from unittest import mock

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from prerequisite import missing, requires  # noqa: E402


class PrerequisiteTest(unittest.TestCase):
    def test_missing_skips_unless_under_ci(self):
        with mock.patch.dict(os.environ, {"CI": "false"}), self.assertRaises(unittest.SkipTest):
            missing("podman")
        with mock.patch.dict(os.environ, {"CI": "true"}), self.assertRaisesRegex(AssertionError, "under CI=true: podman"):
            missing("podman")

    def test_requires_on_a_method_and_on_a_class(self):
        with mock.patch.dict(os.environ, {"CI": "true"}):
            method = requires(False, "jupyter-console")(lambda self: None)
            with self.assertRaisesRegex(AssertionError, "jupyter-console"):
                method(self)

            @requires(False, "the venv")
            class Needs(unittest.TestCase):
                def test_x(self):
                    pass
            with self.assertRaisesRegex(AssertionError, "the venv"):
                Needs.setUpClass()
            self.assertIs(requires(True, "present")(Needs), Needs)
        with mock.patch.dict(os.environ, {"CI": ""}):
            skipped = requires(False, "jupyter-console")(lambda self: None)
            self.assertTrue(getattr(skipped, "__unittest_skip__", False))


if __name__ == "__main__":
    unittest.main()
