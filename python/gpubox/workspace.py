"""Workspace and Library (Seer's names): Python code installed into the sandbox's
kernel. Library files go to the kernel's workspace dir (kernel.workspace_dir,
first on sys.path at every start and restart); custom_init_code runs as hidden
setup code (kernel.execute hidden + setup), which the kernel replays after
every restart, a crash's included."""

import os
from dataclasses import dataclass, field
from typing import Dict, List, Tuple, Union

from .plan import LIBRARY_DIR
from .sandbox import SandboxError

SKIP_DIRS = {"__pycache__", ".git", ".mypy_cache", ".pytest_cache"}


def _check_relative(where: str, path: str) -> str:
    parts = path.replace("\\", "/").split("/")
    if not path or path.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError("%s: %r must be a relative path without '..'" % (where, path))
    return "/".join(parts)


@dataclass
class Library:
    """Python code importable in the kernel as `import NAME`: files maps paths relative to the
    workspace dir ("NAME.py", or "NAME/__init__.py", ...) to their content; docs describes it."""

    name: str
    files: Dict[str, Union[str, bytes]]
    docs: str = ""

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError("Library.name: expected a Python module name, got %r" % (self.name,))
        if not isinstance(self.files, dict) or not self.files:
            raise ValueError("Library(%r).files: expected a dict of relative path to content" % self.name)
        self.files = {_check_relative("Library(%r).files" % self.name, k): v for k, v in self.files.items()}

    @classmethod
    def from_file(cls, path: str, name: str = None, docs: str = None) -> "Library":
        """One module from a .py file; its name is the file's (or name); docs default to its docstring."""
        name = name or os.path.splitext(os.path.basename(path))[0]
        with open(path, encoding="utf-8") as f:
            source = f.read()
        return cls(name, {name + ".py": source}, docs if docs is not None else _docstring(source))

    @classmethod
    def from_directory(cls, path: str, name: str = None, docs: str = None) -> "Library":
        """A package from a directory holding __init__.py (every file below it, caches skipped)."""
        path = os.path.abspath(path)
        if not os.path.isfile(os.path.join(path, "__init__.py")):
            raise ValueError("Library.from_directory: %s has no __init__.py" % path)
        name = name or os.path.basename(path.rstrip("/"))
        files = {}
        for root, dirs, names in os.walk(path):
            dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
            for entry in sorted(names):
                if entry.endswith((".pyc", ".pyo")):
                    continue
                full = os.path.join(root, entry)
                with open(full, "rb") as f:
                    files[name + "/" + os.path.relpath(full, path).replace(os.sep, "/")] = f.read()
        if docs is None:
            init = files[name + "/__init__.py"]
            docs = _docstring(init.decode("utf-8", "replace"))
        return cls(name, files, docs)

    @property
    def is_single_file(self) -> bool:
        return list(self.files) == [self.name + ".py"]


def _docstring(source: str) -> str:
    import ast
    try:
        return ast.get_docstring(ast.parse(source)) or ""
    except SyntaxError:
        return ""


@dataclass
class Workspace:
    """What a notebook session (or a ScopedSandbox's served code) gets besides the models:
    libraries, files copied under /workspace, and hidden init code replayed at every restart.
    preload_models and hidden_model_loading are Seer's; in gpubox the models of SandboxConfig
    are always loaded at the kernel's start, hidden."""

    libraries: List[Library] = field(default_factory=list)
    custom_init_code: Union[str, List[str]] = ""
    preload_models: bool = True
    hidden_model_loading: bool = True
    local_files: List[Tuple[str, str]] = field(default_factory=list)   # (local, path under /workspace or absolute)
    local_dirs: List[Tuple[str, str]] = field(default_factory=list)

    def __post_init__(self):
        if not isinstance(self.libraries, (list, tuple)) or not all(isinstance(l, Library) for l in self.libraries):
            raise ValueError("Workspace.libraries: expected a list of Library, got %r" % (self.libraries,))
        names = [l.name for l in self.libraries]
        if len(set(names)) != len(names):
            raise ValueError("Workspace.libraries: two libraries are named the same")
        if not isinstance(self.custom_init_code, (str, list)) or (
                isinstance(self.custom_init_code, list) and not all(isinstance(c, str) for c in self.custom_init_code)):
            raise ValueError("Workspace.custom_init_code: expected a str or a list of str")

    @property
    def init_code(self) -> List[str]:
        code = self.custom_init_code
        return [c for c in ([code] if isinstance(code, str) else code) if c.strip()]

    def get_library_docs(self) -> str:
        """Markdown: each library's name and docs, for an agent's prompt."""
        return "\n\n".join("## %s\n\n%s" % (l.name, l.docs or "(no docs)") for l in self.libraries)

    def install(self, sandbox) -> None:
        """Writes the libraries and files into the sandbox, then registers and runs the init code."""
        for library in self.libraries:
            for relative, content in library.files.items():
                sandbox.write_file(LIBRARY_DIR + "/" + relative, content)
        if self.libraries:
            # Sandbox.start() makes LIBRARY_DIR the kernel's workspace_dir (first on sys.path); a sandbox
            # made otherwise (gpubox create, then Sandbox.connect) gets it from this setup code, which the
            # kernel replays after every restart.
            _setup(sandbox, LIBRARY_PATH_CODE, "Workspace.libraries")
        for local, remote in list(self.local_files) + list(self.local_dirs):
            sandbox.upload(local, remote if remote.startswith("/") else "/workspace/" + remote)
        for code in self.init_code:
            _setup(sandbox, code, "Workspace.custom_init_code")


LIBRARY_PATH_CODE = ("import importlib, sys\n"
                     "if %r not in sys.path:\n"
                     "    sys.path.insert(0, %r)\n"
                     "importlib.invalidate_caches()\n" % (LIBRARY_DIR, LIBRARY_DIR))


def _setup(sandbox, code: str, what: str) -> None:
    """Runs code as the kernel's hidden setup code (replayed after every restart); SandboxError if it fails."""
    done = sandbox.client.call("kernel.execute", code=code, hidden=True, setup=True)
    if done.get("status") != "ok":
        raise SandboxError("%s failed: %s: %s%s" % (
            what, done.get("ename"), done.get("evalue"), " (the kernel died)" if done.get("died") else ""))
