"""jupyter_kernel_test's conformance suite against the gpubox kernelspec, with
every attribute that applies to a Python kernel filled in (all but the pager)."""
import unittest

import jupyter_kernel_test

from kernel_harness import KERNEL_NAME, require_kernelspec


class GpuboxKernelConformance(jupyter_kernel_test.KernelTests):
    kernel_name = KERNEL_NAME
    language_name = "python"
    file_extension = ".py"

    code_hello_world = "print('hello, world')"
    code_stderr = "import sys; print('test', file=sys.stderr)"
    completion_samples = [
        {"text": "zi", "matches": {"zip"}},
        {"text": "import itertools; itertools.chai", "matches": {"chain"}},  # replaces "chai", like ipykernel
    ]
    complete_code_samples = ["1", "print('hello, world')", "def f(x):\n  return x*2\n\n\n"]
    incomplete_code_samples = ["print('''hello", "def f(x):\n  x*2"]
    invalid_code_samples = ["import = 7q"]
    code_execute_result = [
        {"code": "1+2+3", "result": "6"},
        {"code": "[n*n for n in range(1, 4)]", "result": "[1, 4, 9]"},
        {"code": "'gpu' + 'box'", "result": "'gpubox'"},
    ]
    code_display_data = [
        {"code": "from IPython.display import HTML, display; display(HTML('<b>test</b>'))", "mime": "text/html"},
        {"code": "from IPython.display import Math, display; display(Math(r'\\frac{1}{2}'))", "mime": "text/latex"},
    ]
    code_history_pattern = "1?2*"
    supported_history_operations = ("tail", "range", "search")
    code_inspect_sample = "zip"
    code_clear_output = "from IPython.display import clear_output; clear_output()"
    code_generate_error = "raise ValueError('conformance')"

    @classmethod
    def setUpClass(cls):
        require_kernelspec()
        super().setUpClass()


if __name__ == "__main__":
    unittest.main()
