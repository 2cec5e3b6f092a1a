"""The gpubox package's imports: no cycle between its modules (lazy imports inside functions counted too), and every
module imports on its own in a fresh interpreter. Interpreter: Debian's /usr/bin/python3."""

import ast
import os
import subprocess
import sys
import unittest

PYTHON_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")
PACKAGE_DIR = os.path.join(PYTHON_DIR, "gpubox")


def modules():
    return sorted(name[:-3] for name in os.listdir(PACKAGE_DIR) if name.endswith(".py"))


def imports(module):
    """{module of gpubox it imports: line} from anywhere in its source (top level or inside a function)."""
    with open(os.path.join(PACKAGE_DIR, module + ".py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            targets = [node.module] if node.module else [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "gpubox":
            targets = [node.module[len("gpubox."):] if "." in node.module else "__init__"]
        else:
            continue
        for target in targets:
            found.setdefault(target.split(".")[0], node.lineno)
    return {target: line for target, line in found.items() if target != module}


def cycle(graph):
    """One import cycle of graph as a list of modules, or None."""
    state = {}

    def visit(node, path):
        state[node] = "open"
        for target in sorted(graph.get(node, ())):
            if state.get(target) == "open":
                return path[path.index(target):] + [target]
            if target not in state:
                found = visit(target, path + [target])
                if found:
                    return found
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node, [node])
            if found:
                return found
    return None


class PythonImports(unittest.TestCase):
    def test_no_import_cycle_between_modules(self):
        graph = {module: imports(module) for module in modules() if module != "__init__"}
        graph = {module: {t: line for t, line in targets.items() if t != "__init__"} for module, targets in graph.items()}
        found = cycle(graph)
        self.assertIsNone(found, "an import cycle in python/gpubox: %s" % " -> ".join(found or ()))

    def test_cycle_finder_finds_one(self):
        self.assertEqual(cycle({"client": {"models": 1}, "models": {"errors": 1, "client": 9}}), ["client", "models", "client"])

    def test_every_module_imports_alone_in_a_fresh_interpreter(self):
        env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
        for module in modules():
            name = "gpubox" if module == "__init__" else "gpubox." + module
            with self.subTest(module=name):
                run = subprocess.run([sys.executable, "-c", "import %s" % name], env=env, capture_output=True, text=True)
                self.assertEqual(run.returncode, 0, run.stderr)


if __name__ == "__main__":
    unittest.main()
