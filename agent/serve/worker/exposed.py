"""What interface.py sees (expose, get_model_path) and how it is imported: the functions the worker serves, by name."""

import builtins
import importlib.util
import inspect
import os
import sys

from .schema import describe

EXPOSED = {}   # name -> function, in the order exposed
SIGNATURES = {}  # name -> inspect.Signature, computed once at load
MODELS = {}    # get_model_path: name -> path


def expose(function=None, *, name=None):
    """Marks a function to be served: `@expose` or `@expose(name="other")`."""
    def mark(fn):
        if not callable(fn):
            raise TypeError("@expose: %r is not a function" % (fn,))
        served = name or fn.__name__
        if not isinstance(served, str) or not served.isidentifier():
            raise ValueError("@expose: the name %r is not a Python identifier" % (served,))
        EXPOSED[served] = fn
        return fn
    if function is None:
        return mark
    return mark(function)


def get_model_path(name):
    """The path in the sandbox of a model the sandbox config names (kernel.models
    by name or var_name, model_host.models by name); a hidden model's is the
    path it was placed at."""
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError("no model named %r in the sandbox config (kernel.models, model_host.models)" % (name,)) from None


def load(body):
    MODELS.update(body.get("models") or {})
    path = body["path"]
    for extra in reversed(body.get("sys_path") or []):
        if extra not in sys.path:
            sys.path.insert(0, extra)
    sys.path.insert(0, os.path.dirname(path))
    builtins.expose = expose
    builtins.get_model_path = get_model_path
    module_name = os.path.splitext(os.path.basename(path))[0] or "interface"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError("%s is not a Python file" % path)
    module = importlib.util.module_from_spec(spec)
    module.expose = expose
    module.get_model_path = get_model_path
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    if not EXPOSED:
        raise LookupError("%s exposes no function: mark the ones to serve with @expose" % path)
    SIGNATURES.update((name, inspect.signature(fn)) for name, fn in EXPOSED.items())
    return [describe(name, fn) for name, fn in EXPOSED.items()]


