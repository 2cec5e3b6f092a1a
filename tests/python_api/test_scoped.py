"""gpubox.ScopedSandbox on a real local sandbox: start(workspace=...) installs the
workspace; serve(interface.py, expose_as=...) delegates to gpubox.served.serve
(the served-functions part) and is tested when gpubox.served is present.

Run by ctest (python_api_scoped) with Debian's /usr/bin/python3, also the
sandbox's python; needs root and GPUBOX_CLI.
"""
import os
import unittest

import gpubox
from local_sandboxes import PrivateState, require_root_and_cli

PYTHON = "/usr/bin/python3"
INTERFACE = '''
@expose
def scale(values: list, *, factor: float = 2.0) -> list:
    """Multiplies each value by factor."""
    return [v * factor for v in values]
'''
state = None


def setUpModule():
    global state
    require_root_and_cli()
    state = PrivateState("gpubox-py-scoped-")


def tearDownModule():
    if state is not None:
        state.end()


class ScopedSandboxTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        workspace = gpubox.Workspace(libraries=[gpubox.Library("helpers", {"helpers.py": "K = 3\n"})])
        cls.box = gpubox.ScopedSandbox(gpubox.SandboxConfig(python=PYTHON, timeout=600))
        cls.started = cls.box.start(workspace=workspace, name="py-scoped")
        cls.interface = os.path.join(state.root, "interface.py")
        with open(cls.interface, "w") as f:
            f.write(INTERFACE)

    @classmethod
    def tearDownClass(cls):
        cls.box.terminate()

    def test_start_installs_the_workspace(self):
        self.assertIs(self.started, self.box)
        self.assertIsInstance(self.box, gpubox.Sandbox)
        self.assertEqual(self.box.name, "py-scoped")
        self.assertEqual(self.box.read_file("/workspace/libraries/helpers.py"), "K = 3\n")

    def test_serve_as_a_library(self):
        module = self.box.serve(self.interface, expose_as="library", name="scaler")
        self.assertEqual(module.scale([1, 2], factor=3.0), [3.0, 6.0])
        self.assertEqual(module.scale.__doc__.strip(), "Multiplies each value by factor.")

    def test_serve_as_a_prompt_and_as_mcp(self):
        prompt = self.box.serve(self.interface, expose_as="prompt", name="scaler_prompt")
        self.assertIn("scale", prompt)
        self.assertIn("Multiplies each value by factor.", prompt)
        config = self.box.serve(self.interface, expose_as="mcp", name="scaler_mcp")
        self.assertEqual(config, {"mcpServers": {"scaler_mcp": {
            "command": os.path.abspath(os.environ["GPUBOX_CLI"]),
            "args": ["mcp", "--sandbox", self.box.sandbox_id, "--service", "scaler_mcp"]}}})


if __name__ == "__main__":
    unittest.main()
