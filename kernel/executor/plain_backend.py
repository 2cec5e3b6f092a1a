"""The plain backend, used without IPython: cells run with exec/eval in a __main__ module, with the same frames as the IPython backend."""

import ast
import builtins
import codeop
import linecache
import re
import sys
import types

from .cells import ask_exit, record_error
from .channel import emit_final
from .display import plain_display, plain_format
from .state import run_user_code
from .tracebacks import clean_traceback


class _Exit:
    """Plain mode's exit and quit: called, or alone on a line, they ask the frontend to leave."""

    def __call__(self, keep_kernel=False):
        ask_exit(keep_kernel)

    def __repr__(self):
        return "Use exit() or quit() to leave this frontend (the kernel keeps running)"


class PlainBackend:
    """Runs cells with exec/eval in a __main__ module; the same messages as IPython mode."""
    name = "plain"

    def __init__(self):
        self.main = types.ModuleType("__main__")
        self.ns = self.main.__dict__
        self.ns.update({"__builtins__": builtins, "In": [""], "Out": {}, "_": None})
        sys.modules["__main__"] = self.main
        builtins.display = plain_display
        builtins.exit = builtins.quit = self.exit = _Exit()

    def run(self, code, count, silent, store_history):
        filename = "<cell %d>" % count if store_history else "<hidden cell>"
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        try:
            tree = ast.parse(code, filename=filename)
        except (SyntaxError, ValueError, OverflowError) as error:
            record_error(type(error).__name__, str(error), clean_traceback(type(error), error, None))
            return False
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        try:
            code = compile(tree, filename, "exec")
            value = run_user_code(self._run, code, compile(last, filename, "eval") if last is not None else None)
        except BaseException as error:  # KeyboardInterrupt and SystemExit too: the cell failed, the executor lives
            record_error(type(error).__name__, str(error), clean_traceback(type(error), error, error.__traceback__))
            return False
        if store_history:
            self.ns["In"].append(code)
        if value is self.exit:  # `exit` alone on a line, as IPython's autocall takes it
            value = self.exit()
        if value is not None and not silent:
            self.ns["_"] = value
            if store_history:
                self.ns["Out"][count] = value
                self.ns["_%d" % count] = value
            data, metadata = run_user_code(plain_format, value)  # the value's reprs are user code
            emit_final({"type": "execute_result", "data": data, "metadata": metadata})
        return True

    def _run(self, code, last):
        """The cell's statements, then its trailing expression's value (None without one)."""
        exec(code, self.ns)
        return eval(last, self.ns) if last is not None else None

    def complete(self, code, cursor_pos):
        import rlcompleter
        match = re.search(r"[\w.]*$", code[:cursor_pos])
        token = match.group(0) if match else ""
        completer = rlcompleter.Completer(self.ns)
        matches, i = [], 0
        while True:
            candidate = completer.complete(token, i)
            if candidate is None:
                break
            matches.append(candidate.rstrip("("))
            i += 1
        return {"matches": sorted(set(matches)), "cursor_start": cursor_pos - len(token),
                "cursor_end": cursor_pos, "metadata": {}, "status": "ok"}

    def inspect(self, code, cursor_pos, detail_level):
        import pydoc
        match = re.search(r"[\w.]*$", code[:cursor_pos])
        rest = re.match(r"[\w.]*", code[cursor_pos:])
        name = (match.group(0) if match else "") + (rest.group(0) if rest else "")
        try:
            obj = eval(name, self.ns) if name else None
        except Exception:
            obj = None
        if obj is None:
            return {"status": "ok", "found": False, "data": {}, "metadata": {}}
        text = pydoc.render_doc(obj, title="%s", renderer=pydoc.plaintext)
        return {"status": "ok", "found": True, "data": {"text/plain": text}, "metadata": {}}

    def is_complete(self, code):
        try:
            compiled = codeop.compile_command(code, "<input>", "exec")
        except (SyntaxError, OverflowError, ValueError):
            return {"status": "invalid"}
        if compiled is None:
            indent = "    " if code.rstrip().endswith(":") else ""
            return {"status": "incomplete", "indent": indent}
        return {"status": "complete"}
