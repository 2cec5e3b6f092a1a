"""cmake/ModeldChoice.cmake: under CI=true a build without LibTorch fails unless
-DGPUBOX_BUILD_MODELD=OFF says so, whatever an earlier configure left in the
cache (the stale-cache skip of issue 46). Configures tests/cmake/modeld_choice."""

import os
import shutil
import subprocess
import tempfile
import unittest

PROJECT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "modeld_choice")


class ModeldChoiceTest(unittest.TestCase):
    def setUp(self):
        self.build = tempfile.mkdtemp(prefix="gpubox-modeld-choice-")
        self.addCleanup(shutil.rmtree, self.build, True)

    def configure(self, *args, ci=None):
        env = {k: v for k, v in os.environ.items() if k != "CI"}
        if ci is not None:
            env["CI"] = ci
        return subprocess.run(["cmake", "-S", PROJECT, "-B", self.build, *args], env=env, capture_output=True, text=True)

    def assert_fails_for_libtorch(self, run):
        self.assertNotEqual(run.returncode, 0, run.stdout)
        self.assertIn("CI=true, and no LibTorch", run.stderr)

    def test_a_stale_cache_from_a_configure_without_ci_does_not_skip_the_check(self):
        first = self.configure("-DTORCH_FOUND=OFF")
        self.assertEqual(first.returncode, 0, first.stderr)
        self.assertIn("BUILD_MODELD=OFF", first.stdout)
        self.assert_fails_for_libtorch(self.configure("-DTORCH_FOUND=OFF", ci="true"))

    def test_a_cache_the_old_option_wrote_does_not_skip_the_check(self):
        legacy = self.configure("-DTORCH_FOUND=OFF",
                                "-DGPUBOX_BUILD_MODELD:BOOL=OFF")
        self.assertEqual(legacy.returncode, 0, legacy.stderr)
        cache = os.path.join(self.build, "CMakeCache.txt")
        with open(cache) as f:
            text = f.read()
        # As option() left it: its help string, type BOOL, value OFF.
        text = text.replace("//Build gpubox-modeld: AUTO (when LibTorch is found), ON or OFF\nGPUBOX_BUILD_MODELD:BOOL=OFF",
                            "//Build gpubox-modeld (needs LibTorch: a PyTorch 2.x wheel)\nGPUBOX_BUILD_MODELD:BOOL=OFF")
        self.assertIn("//Build gpubox-modeld (needs LibTorch: a PyTorch 2.x wheel)\nGPUBOX_BUILD_MODELD:BOOL=OFF", text)
        with open(cache, "w") as f:
            f.write(text)
        self.assert_fails_for_libtorch(self.configure("-DTORCH_FOUND=OFF", ci="true"))

    def test_an_explicit_off_builds_without_the_model_host_under_ci(self):
        run = self.configure("-DTORCH_FOUND=OFF", "-DGPUBOX_BUILD_MODELD=OFF", ci="true")
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertIn("BUILD_MODELD=OFF", run.stdout)
        again = self.configure("-DTORCH_FOUND=OFF", ci="true")
        self.assertEqual(again.returncode, 0, "the explicit OFF stays the choice: " + again.stderr)

    def test_auto_builds_when_libtorch_is_found_and_on_without_it_fails(self):
        found = self.configure("-DTORCH_FOUND=ON", ci="true")
        self.assertEqual(found.returncode, 0, found.stderr)
        self.assertIn("BUILD_MODELD=ON", found.stdout)
        shutil.rmtree(self.build)
        on = self.configure("-DTORCH_FOUND=OFF", "-DGPUBOX_BUILD_MODELD=ON")
        self.assertNotEqual(on.returncode, 0)
        self.assertIn("GPUBOX_BUILD_MODELD is ON but", on.stderr)
        bad = self.configure("-DTORCH_FOUND=OFF", "-DGPUBOX_BUILD_MODELD=maybe")
        self.assertIn("GPUBOX_BUILD_MODELD 'maybe': expected AUTO, ON or OFF", bad.stderr)


if __name__ == "__main__":
    unittest.main()
