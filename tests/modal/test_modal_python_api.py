"""SandboxConfig(backend="modal") through the Python API: Sandbox.start runs the
real CLI, which runs the real SDK against the fake Modal control plane
(modal_harness.py); the sandbox is a podman container with the real agent as
PID 1. Interpreter: build/venv/bin/python (the SDK is in the venv only)."""

import json
import os
import unittest

import gpubox

from modal_harness import IMAGE, ModalTestCase, stop_shared_fake


def tearDownModule():
    stop_shared_fake()


class ModalPythonApiTest(ModalTestCase):
    """start, exec, files, a notebook cell, terminate; nothing left."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        # Sandbox runs `gpubox` with this process's environment: a Modal user's, pointed at the fake.
        cls.saved_env = dict(os.environ)
        os.environ.clear()
        os.environ.update(cls.env, GPUBOX_API_SECRET="api-secret-value-6a1f")

    @classmethod
    def tearDownClass(cls):
        os.environ.clear()
        os.environ.update(cls.saved_env)
        super().tearDownClass()

    def test_start_exec_files_notebook_terminate(self):
        config = gpubox.SandboxConfig(backend="modal", image=IMAGE, cpu=1, memory="512MiB", timeout=300,
                                      idle_timeout=200, env={"MODE": "api"}, secrets=["GPUBOX_API_SECRET"],
                                      volumes={"/weights": "api-weights"}, modal_app="gpubox-api-test")
        calls = len(self.fake.calls())
        sandbox = gpubox.Sandbox(config).start(name="api-box")
        try:
            definition = self.fake.definitions()[-1]
            self.assertEqual((definition["milli_cpu"], definition["memory_mb"], definition["timeout_secs"]),
                             (1000, 512, 300))
            self.assertEqual(definition["volumes"], {"/weights": "vo-api-weights"})
            self.assertEqual(definition["name"], "api-box")
            self.assertEqual(definition["network"], {"type": 3, "cidrs": []})  # no packages: no network
            self.assertIn("AppGetOrCreate", self.fake.calls()[calls:])
            info = self.record(sandbox.sandbox_id)
            self.assertEqual((info["backend"], info["spec"]["app"]), ("modal", "gpubox-api-test"))

            ran = sandbox.exec("cat /proc/1/comm; echo $MODE $GPUBOX_API_SECRET; exit 3")
            self.assertEqual((ran.stdout, ran.returncode), ("gpubox-agent\napi api-secret-value-6a1f\n", 3))
            sandbox.write_file("/weights/notes.txt", "on the volume\n")
            self.assertEqual(sandbox.read_file("/weights/notes.txt"), "on the volume\n")
            with open(os.path.join(self.fake.volumes_dir, "api-weights", "notes.txt")) as f:
                self.assertEqual(f.read(), "on the volume\n")
            data = bytes(range(256)) * 4096
            sandbox.write_file("/workspace/blob.bin", data)
            self.assertEqual(sandbox.read_file("/workspace/blob.bin", binary=True), data)

            session = gpubox.create_notebook_session(sandbox)
            cell = session.exec("1 + 1")
            self.assertTrue(cell.success, cell.error)
            self.assertEqual(cell.text, "2")
            session.close()
        finally:
            modal_id = self.record(sandbox.sandbox_id)["spec"]["modal_id"]
            sandbox.terminate()
        self.assertEqual(self.store_ids(), [])
        self.assertNotIn("fake-modal-" + modal_id, self.fake.containers(running_only=True))

    def test_a_refused_field_starts_nothing(self):
        calls = len(self.fake.calls())
        with self.assertRaises(ValueError) as raised:
            gpubox.Sandbox(gpubox.SandboxConfig(backend="modal", gpu="H100", gpu_count=16)).start()
        self.assertIn("SandboxConfig.gpu_count", str(raised.exception))
        self.assertEqual(self.fake.calls()[calls:], [])
        self.assertEqual(json.loads(self.ok("ls", "--json")), [])


if __name__ == "__main__":
    unittest.main()
