"""A notebook cell drives a Modal sandbox's model host: `gpubox create --backend
modal` (the real CLI and SDK, the fake control plane of modal_harness.py, a
podman container with the real agent as PID 1) with a model host serving the
model fixture's tiny Llama from a volume; a cell captures and steers with
gpubox.Client() (the agent serves the package to its kernel) and gets what a
remote caller gets through the tunnel and CURVE (model_harness.check_notebook_cell).
Interpreter: build/venv/bin/python (the SDK is in the venv only)."""

import json
import os
import shutil
import sys
import unittest
from unittest import mock

from modal_harness import ModalTestCase, stop_shared_fake

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python_models"))
from model_harness import check_notebook_cell, fixture, notebook_cell  # noqa: E402
import gpubox  # noqa: E402


def tearDownModule():
    stop_shared_fake()


class ModalNotebookModelTest(ModalTestCase):
    def test_a_cell_drives_the_same_model_host(self):
        refs = fixture()
        shutil.copytree(refs["llama"], os.path.join(self.fake.volumes_dir, "nb-weights", "tiny"))
        config = os.path.join(self.work, "model-config.json")
        with open(config, "w") as f:
            json.dump({"model_host": {"models": [{"name": "tiny", "path": "/weights/tiny"}]}}, f)
        sandbox = self.create("--name", "notebook-model", "--timeout", "300", "--config", config,
                              "--volume", "nb-weights:/weights")
        try:
            with mock.patch.dict(os.environ, XDG_STATE_HOME=self.env["XDG_STATE_HOME"]):  # the CLI's records
                client = gpubox.connect(sandbox)
            with client:
                model = client.model("tiny")
                model.wait_ready(timeout=120)
                got = json.loads(self.ok("run-code", sandbox, notebook_cell(refs)).splitlines()[-1])
                check_notebook_cell(self, got, model, refs)
        finally:
            self.ok("terminate", sandbox)


if __name__ == "__main__":
    unittest.main()
