"""nbclient runs a notebook on the gpubox kernel: a matplotlib plot, a raising
cell (allow_errors), an input() cell (nbclient has no stdin: a clear error) and
plain output; the outputs saved in the notebook are checked."""
import base64
import os
import tempfile
import unittest

import nbformat
from nbclient import NotebookClient

from kernel_harness import KERNEL_NAME, require_kernelspec


class NotebookTest(unittest.TestCase):
    def setUp(self):
        require_kernelspec()

    def test_notebook_outputs_are_saved(self):
        nb = nbformat.v4.new_notebook()
        nb.cells = [
            nbformat.v4.new_code_cell("import matplotlib.pyplot as plt\nplt.plot([0, 1], [1, 0])\nplt.title('gpubox')\nplt.show()"),
            nbformat.v4.new_code_cell("raise RuntimeError('expected failure')"),
            nbformat.v4.new_code_cell("answer = input('your name? ')"),
            nbformat.v4.new_code_cell("print('after the errors')\n21 * 2"),
        ]
        client = NotebookClient(nb, kernel_name=KERNEL_NAME, timeout=120, allow_errors=True)
        client.execute()
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "run.ipynb")
            nbformat.write(nb, path)
            saved = nbformat.read(path, as_version=4)
        nbformat.validate(saved)
        plot, raising, asking, plain = saved.cells

        images = [o for o in plot.outputs if o.output_type == "display_data" and "image/png" in o.data]
        self.assertEqual(len(images), 1)
        self.assertTrue(base64.b64decode(images[0].data["image/png"]).startswith(b"\x89PNG"))

        self.assertEqual([o.output_type for o in raising.outputs], ["error"])
        self.assertEqual(raising.outputs[0].ename, "RuntimeError")
        self.assertEqual(raising.outputs[0].evalue, "expected failure")

        self.assertEqual([o.output_type for o in asking.outputs], ["error"])
        self.assertEqual(asking.outputs[0].ename, "StdinNotImplementedError")

        self.assertEqual(plain.outputs[0].output_type, "stream")
        self.assertEqual(plain.outputs[0].text, "after the errors\n")
        self.assertEqual(plain.outputs[1].output_type, "execute_result")
        self.assertEqual(plain.outputs[1].data["text/plain"], "42")
        self.assertEqual(plain.execution_count, 4)


if __name__ == "__main__":
    unittest.main()
