"""tests/prerequisite.py: a missing prerequisite that the setup installs skips on a
developer's machine and fails under CI=true; scripts/test.sh (run by hand or by CI)
sets CI=true once its setup has run, so there it fails whatever the caller set."""

import os
import subprocess
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


ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


class TestShIsStrictTest(unittest.TestCase):
    def test_test_sh_sources_the_strict_environment_after_its_setup_and_before_any_build(self):
        with open(os.path.join(ROOT, "scripts", "test.sh")) as f:
            lines = [line.strip() for line in f]
        strict = lines.index("source scripts/lib/strict_prerequisites.sh")
        self.assertLess(lines.index("phase setup_images scripts/setup_images.sh"), strict)
        self.assertLess(lines.index("phase setup_kubernetes scripts/setup_kubernetes.sh"), strict)
        self.assertGreater(lines.index('phase "build default" scripts/build.sh default'), strict)

    def test_under_the_strict_environment_a_missing_prerequisite_fails_whatever_ci_was(self):
        probe = ("import sys; sys.path.insert(0, 'tests'); import prerequisite, unittest\n"
                 "try:\n    prerequisite.missing('podman')\nexcept unittest.SkipTest:\n    print('skipped')\n"
                 "except AssertionError as error:\n    print('failed:', error)\n")
        for ci in (None, "false", ""):
            env = {k: v for k, v in os.environ.items() if k != "CI"}
            if ci is not None:
                env["CI"] = ci
            plain = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True)
            self.assertEqual(plain.stdout.strip(), "skipped", "without the strict environment it skips")
            strict = subprocess.run(["bash", "-c", 'source scripts/lib/strict_prerequisites.sh && exec "$0" -c "$1"',
                                     sys.executable, probe], cwd=ROOT, env=env, capture_output=True, text=True)
            self.assertIn("failed: a prerequisite the setup installs is missing under CI=true: podman", strict.stdout,
                          strict.stderr)


if __name__ == "__main__":
    unittest.main()
