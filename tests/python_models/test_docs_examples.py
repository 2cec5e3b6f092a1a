"""docs/python.md's section "The model host from Python" runs as written: every
python block of it, in order, in one namespace, against a real local sandbox
serving the model fixture's tiny Llama (the docs' "ID" and "llama" stand for
the sandbox and the model). Then what the blocks computed is checked against
the shapes the docs state. Interpreter: build/venv/bin/python (torch tensors)
and Debian's /usr/bin/python3 (numpy arrays)."""

import contextlib
import io
import os
import re

from model_harness import ModelSandboxTestCase

DOCS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "python.md")
SECTION = "## The model host from Python"


def example_blocks():
    with open(DOCS) as f:
        text = f.read()
    start = text.index(SECTION)
    end = text.index("\n## ", start + len(SECTION))
    return re.findall(r"```python\n(.*?)```", text[start:end], re.S)


class DocsExamplesTest(ModelSandboxTestCase):
    def test_every_example_runs_as_written(self):
        blocks = example_blocks()
        self.assertGreaterEqual(len(blocks), 6)
        scope = {}
        printed = io.StringIO()
        for block in blocks:
            code = block.replace('gpubox.connect("ID")', 'gpubox.connect(%r)' % self.id).replace(
                'client.model("llama")', 'client.model("tiny")')
            with contextlib.redirect_stdout(printed):
                exec(compile(code, "docs/python.md", "exec"), scope)
        n, info = len(scope["ids"]), scope["info"]
        self.assertEqual(tuple(scope["resid"].shape), (1, n, info["hidden_size"]))
        points = scope["model"].hooks()
        self.assertEqual(len(points), info["hook_points"])
        # every point but logits and the opt-in ones (attn.hook_result)
        self.assertEqual(set(scope["cache"]), {p["name"] for p in points if p["name"] != "logits" and not p.get("opt_in")})
        self.assertEqual(tuple(scope["pattern"].shape), (1, info["heads"], n, n))
        self.assertEqual(tuple(scope["last"].shape), (1, 1, 1, n))
        self.assertEqual(tuple(scope["attribution"].shape), (1, n))
        self.assertEqual(tuple(scope["grad"].value.shape), (1, n, info["hidden_size"]))
        self.assertIn("corrupted", printed.getvalue())
