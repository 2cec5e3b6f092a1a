"""Calls back once user code has imported a given module (matplotlib.pyplot, comm), through a one-shot finder that wraps the module's loader; imports nothing itself."""

import sys


class AfterImport:
    """Calls callback(module) once the module `name` has been imported by user code
    (or at once, if it already was); nothing is imported for it."""

    def __init__(self, name, callback):
        self.name, self.callback = name, callback
        if name in sys.modules:
            callback(sys.modules[name])
        else:
            sys.meta_path.insert(0, self)

    def find_spec(self, name, path, target=None):
        if name != self.name:
            return None
        import importlib.util
        sys.meta_path.remove(self)  # once: find the real module, then wrap its loader
        spec = importlib.util.find_spec(name)
        if spec is None or not hasattr(spec.loader, "exec_module"):
            return spec
        callback, loader = self.callback, spec.loader

        class Loader:
            def create_module(self, spec):
                return loader.create_module(spec)

            def exec_module(self, module):
                loader.exec_module(module)
                callback(module)

        spec.loader = Loader()
        return spec
