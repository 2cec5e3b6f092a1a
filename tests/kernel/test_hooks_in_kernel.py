"""The agent serves the gpubox package to its kernel (kernel/model_setup.cpp):
`from gpubox import hooks` (python/gpubox/hooks.py) works in a cell when
the image has no gpubox package, survives a restart, runs the spec on a
transformers model made in the cell, and says plainly that a sandbox without
a model host has no native model. Interpreter of the kernel:
build/venv/bin/python (torch, transformers); of the test: Debian's python3."""
import os

from kernel_harness import requires
from test_agent_kernel import AgentKernelCase

VENV_PYTHON = os.path.join(os.path.dirname(__file__), "../../build/venv/bin/python")

CELL = """
import torch, transformers as tf
from gpubox import hooks
torch.manual_seed(0)
m = tf.GPT2LMHeadModel(tf.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=64, n_positions=16)).eval()
r = hooks.run(m, [1, 2, 3, 4], capture=["blocks.1.hook_resid_post"], ops=[{"op": "zero", "hook": "blocks.0.attn.hook_z", "heads": [1]}])
plain = m(torch.tensor([[1, 2, 3, 4]])).logits
print(hooks.__file__, tuple(r["blocks.1.hook_resid_post"].shape), bool((r["logits"] - plain).abs().max() > 0))
"""


@requires(os.path.exists(VENV_PYTHON), "build/venv is missing (scripts/setup_python.sh)")
class HooksInKernel(AgentKernelCase):
    kernel_config = {"python": os.path.abspath(VENV_PYTHON)}

    def stdout(self, code):
        result = self.client.call("kernel.execute", code=code, timeout=240)
        errors = [o for o in result["outputs"] if o.get("kind") == "error"]
        self.assertEqual(errors, [])
        return "".join(o.get("text", "") for o in result["outputs"] if o.get("stream") == "stdout")

    def test_the_toolkit_is_injected_and_runs_the_spec_on_a_transformers_model(self):
        self.assertEqual(self.stdout(CELL).split(), ["<gpubox>/hooks.py", "(1,", "4,", "32)", "True"])
        self.client.call("kernel.restart")
        self.assertEqual(self.stdout("import gpubox.hooks as h; print(h.OPS[-1], 'gpubox' in dir())"), "fn False\n")
        message = self.stdout("from gpubox import hooks\ntry:\n    hooks.names('native')\nexcept Exception as e:\n    print(e)")
        self.assertEqual(message, "unavailable: no model host: the config has no model_host section\n")
