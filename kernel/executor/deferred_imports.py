"""Importing IPython lean: modules it imports but needs only later load lazily, jedi at the first completion, IPython.terminal.embed as a stub."""

import sys
import types

# Imported by IPython's own modules at import time but needed only later (an
# error's traceback, asyncio code, !cmd through pexpect): loaded on first use.
_LAZY_MODULES = frozenset({"asyncio", "pexpect", "stack_data", "uuid", "sqlite3"})


class _DeferredJedi:
    """The loader of jedi while IPython is imported: loading fails."""

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        raise ModuleNotFoundError("jedi is loaded at the first completion", name=module.__name__)


class DeferredImports:
    """While IPython is imported: the modules of _LAZY_MODULES load lazily, and
    jedi looks absent (IPython's completer then starts without it; the first
    completion loads it, see enable_jedi). IPython.terminal.embed, which pulls
    in prompt_toolkit (a terminal UI a kernel never uses), is a stub whose
    embed() loads the real module. Saves about 15 MiB of idle memory."""

    def find_spec(self, name, path, target=None):
        if name == "jedi" or name.startswith("jedi."):
            # A spec whose loading fails: `import jedi` raises ImportError (IPython 8
            # imports it at once), while importlib.util.find_spec, which IPython 9
            # asks before importing jedi lazily itself, still sees it installed.
            import importlib.machinery
            return importlib.machinery.ModuleSpec(name, _DeferredJedi())
        if name not in _LAZY_MODULES:
            return None
        import importlib.machinery
        import importlib.util
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = importlib.util.LazyLoader(spec.loader)
        return spec

    def __enter__(self):
        sys.meta_path.insert(0, self)
        stub = types.ModuleType("IPython.terminal.embed")

        def embed(*args, **kwargs):
            sys.modules.pop("IPython.terminal.embed", None)
            from IPython.terminal.embed import embed as real_embed
            return real_embed(*args, **kwargs)

        stub.embed = embed
        self.stub = stub
        sys.modules.setdefault("IPython.terminal.embed", stub)
        return self

    def __exit__(self, *exc):
        sys.meta_path.remove(self)
        if sys.modules.get("IPython.terminal.embed") is self.stub:
            del sys.modules["IPython.terminal.embed"]
            terminal = sys.modules.get("IPython.terminal")
            if getattr(terminal, "embed", None) is self.stub:
                del terminal.embed


def enable_jedi(shell):
    """Gives IPython's completer jedi, as it would have had it at import."""
    completer_module = sys.modules.get("IPython.core.completer")
    if completer_module is None or getattr(completer_module, "JEDI_INSTALLED", True):
        return
    try:
        import jedi
        jedi.settings.case_insensitive_completion = False
        import jedi.api.helpers  # noqa: F401
        import jedi.api.classes  # noqa: F401
    except ImportError:
        completer_module.JEDI_INSTALLED = None  # absent for real: do not try again
        return
    completer_module.jedi = jedi
    completer_module.JEDI_INSTALLED = True
    if "use_jedi" not in shell.config.get("IPCompleter", {}):
        shell.Completer.use_jedi = True
