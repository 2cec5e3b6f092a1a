"""IPython made cheaper per cell, same output: formatters without the decorator package's wrapper, builtin values formatted as text/plain alone, cells without escapes left untokenized."""

import sys
import traceback


def speed_up_formatters():
    """IPython wraps each formatter's __call__ with the decorator package, whose
    signature binding costs more than the formatting of a small result; the
    same error handling (IPython's catch_format_error) as a plain wrapper."""
    from IPython.core import formatters
    from IPython.core.getipython import get_ipython

    def catching(method):
        def __call__(self, *args, **kwargs):
            try:
                r = method(self, *args, **kwargs)
            except NotImplementedError:
                return self._check_return(None, args[0])
            except Exception:
                ip = get_ipython()
                if ip is not None:
                    ip.showtraceback(sys.exc_info())
                else:
                    traceback.print_exc()
                return self._check_return(None, args[0])
            return self._check_return(r, args[0])
        __call__.__doc__ = method.__doc__
        return __call__

    for value in list(vars(formatters).values()):
        if isinstance(value, type) and issubclass(value, formatters.BaseFormatter):
            call = value.__dict__.get("__call__")
            inner = getattr(call, "__wrapped__", None)
            if inner is not None and call.__module__ == formatters.__name__:
                value.__call__ = catching(inner)

    # A builtin value (a number, a string, a list...) has no _repr_*_ method, so
    # unless some formatter has a printer registered for its type, text/plain is
    # its only format: computed alone, without asking the other eleven.
    builtin_types = (int, float, complex, str, bytes, bool, list, tuple, dict, set, frozenset)
    full_format = formatters.DisplayFormatter.format

    def registered(formatter, cls, key):
        # The trait values as traitlets stores them (a trait never read holds no
        # registration); reading them as traits costs more than the formatting.
        values = formatter._trait_values
        return cls in values.get("type_printers", ()) or key in values.get("deferred_printers", ())

    def format(self, obj, include=None, exclude=None):
        cls = type(obj)
        if cls in builtin_types and not include and not exclude:
            key = (cls.__module__, cls.__name__)
            plain = self.formatters.get("text/plain")
            others = [self.ipython_display_formatter, self.mimebundle_formatter, *self.formatters.values()]
            try:
                alone = plain is not None and not any(registered(f, cls, key) for f in others if f is not plain)
            except AttributeError:  # another traitlets
                alone = False
            if alone:
                data, md = plain(obj), None
                if isinstance(data, tuple) and len(data) == 2:
                    data, md = data
                return ({"text/plain": data} if data is not None else {}), ({"text/plain": md} if md is not None else {})
        return full_format(self, obj, include, exclude)

    format.__doc__ = full_format.__doc__
    formatters.DisplayFormatter.format = format


def skip_idle_token_transforms(manager):
    """IPython tokenizes every cell, repeatedly, to look for %magic, !cmd, obj?
    and the line escapes , ; / that its default token transformers rewrite. A
    cell without any of those characters (where they could start a transform)
    is left alone without tokenizing it; other transformers keep the full path."""
    from IPython.core import inputtransformer2 as it
    defaults = [it.MagicAssign, it.SystemAssign, it.EscapedCommand, it.HelpEnd]
    full = manager.do_token_transforms

    def do_token_transforms(lines):
        if manager.token_transformers == defaults and not any(
                "%" in line or "!" in line or "?" in line or line.lstrip()[:1] in (",", ";", "/")
                for line in lines):
            return lines
        return full(lines)

    manager.do_token_transforms = do_token_transforms
