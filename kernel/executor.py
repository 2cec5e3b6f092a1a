# gpubox Python executor: runs user code for the agent's Jupyter kernel.
#
# The agent starts the image's python3 with a tiny bootstrap that reads this
# source as the first frame of the private channel (fd 3) and executes it.
# Frames: a 4-byte big-endian length, then one JSON object. fds 1 and 2 are
# pipes the agent reads, so output from print, os.write, C extensions and
# subprocesses is captured alike; fd 0 is /dev/null (input() goes through the
# channel). With IPython importable the executor uses its InteractiveShell
# (magics, !cmd, display formatters, _ and Out); otherwise a plain mode with the
# same messages.
import ast
import base64
import builtins
import codeop
import io
import json
import linecache
import os
import re
import signal
import struct
import sys
import threading
import time
import traceback
import types
import warnings

CHANNEL_FD = 3
EXECUTOR_FILE = "<gpubox-executor>"


class _State:
    running = False  # user code is running: SIGINT raises KeyboardInterrupt
    sending = 0  # inside a channel operation: an interrupt waits until it ends
    interrupt_pending = False
    error = None  # the error of the running cell: {ename, evalue, traceback}
    payload = []  # the running cell's execute_reply payload (ask_exit)
    final_frame = b""  # the cell's trailing result, held to go out with the next frame


state = _State()
_send_lock = threading.Lock()


def _on_sigint(signum, frame):
    if state.running and not state.sending:
        raise KeyboardInterrupt
    if state.running:
        state.interrupt_pending = True


def _raise_pending_interrupt():
    if state.interrupt_pending and state.running and not state.sending:
        state.interrupt_pending = False
        raise KeyboardInterrupt


_received = bytearray()  # channel bytes read but not yet parsed (one read often holds a whole frame)


def _read_exact(n):
    while len(_received) < n:
        try:
            chunk = os.read(CHANNEL_FD, max(65536, n - len(_received)))
        except InterruptedError:
            continue
        if not chunk:
            os._exit(0)  # the agent closed the channel
        _received.extend(chunk)
    data = bytes(_received[:n])
    del _received[:n]
    return data


def recv():
    state.sending += 1
    try:
        (length,) = struct.unpack(">I", _read_exact(4))
        return json.loads(_read_exact(length))
    finally:
        state.sending -= 1


def _flush_std():
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except Exception:
            pass


def _frame(msg):
    data = json.dumps(msg, default=repr).encode("utf-8", "surrogateescape")
    return struct.pack(">I", len(data)) + data


def send(msg, wait_ack=False):
    """Sends one frame; stdout and stderr are flushed first so output keeps its order.

    With wait_ack (rich output during a cell), waits until the agent has published
    everything the pipes held before the frame, and the frame: output written
    afterwards cannot overtake it; the agent's answer is returned. Between cells
    (a background thread) nothing waits: the main loop alone reads the channel then.
    """
    _flush_std()
    with _send_lock:
        state.sending += 1
        try:
            if wait_ack and not state.running and msg.get("type") != "input_request":
                wait_ack = False
                msg["ack"] = False
            data = state.final_frame + _frame(msg)  # a held cell result goes first, in the same write
            state.final_frame = b""
            view = memoryview(data)
            while view:
                try:
                    view = view[os.write(CHANNEL_FD, view):]
                except InterruptedError:
                    pass
            reply = recv() if wait_ack else None
        finally:
            state.sending -= 1
    _raise_pending_interrupt()
    return reply


def emit(msg):
    """Sends a rich output frame (display, execute_result, clear_output, error) in order."""
    send(msg, wait_ack=True)


def emit_final(msg):
    """Holds the cell's last rich frame (its trailing result) until the next frame,
    normally the cell's done frame, and sends both in one write: no user code
    writes after it, so nothing can overtake it and the agent need not answer it."""
    msg["ack"] = False
    with _send_lock:
        state.final_frame += _frame(msg)


# ---------------------------------------------------------------- input()

allow_stdin = False


class StdinNotImplementedError(RuntimeError):
    pass


def _input_request(prompt="", password=False):
    if not allow_stdin:
        raise StdinNotImplementedError(
            "input() is not available: this execute_request did not allow stdin "
            "(allow_stdin is false; the frontend does not support input requests)")
    if not state.running:
        raise StdinNotImplementedError("input() is not available between cells (no request is running to answer it)")
    reply = send({"type": "input_request", "prompt": str(prompt), "password": bool(password)}, wait_ack=True)
    if reply.get("interrupted"):
        state.interrupt_pending = False
        raise KeyboardInterrupt
    if "error" in reply:
        raise StdinNotImplementedError(reply["error"])
    return reply.get("value", "")


def _input(prompt=""):
    return _input_request(prompt, False)


def _getpass(prompt="Password: ", stream=None):
    return _input_request(prompt, True)


# ---------------------------------------------------------------- rich output

_REPR_METHODS = [
    ("_repr_html_", "text/html"),
    ("_repr_markdown_", "text/markdown"),
    ("_repr_svg_", "image/svg+xml"),
    ("_repr_png_", "image/png"),
    ("_repr_jpeg_", "image/jpeg"),
    ("_repr_latex_", "text/latex"),
    ("_repr_json_", "application/json"),
    ("_repr_javascript_", "application/javascript"),
]


def _jsonable(value):
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    return value


def plain_format(obj):
    """The MIME bundle of obj without IPython: every _repr_*_ it has, and text/plain."""
    data, metadata = {}, {}
    bundle = getattr(obj, "_repr_mimebundle_", None)
    if callable(bundle):
        try:
            result = bundle()
            if isinstance(result, tuple):
                result, metadata = result[0], dict(result[1] or {})
            for mime, value in (result or {}).items():
                data[mime] = _jsonable(value)
        except Exception:
            pass
    for method, mime in _REPR_METHODS:
        fn = getattr(obj, method, None)
        if mime in data or not callable(fn) or isinstance(obj, type):
            continue
        try:
            value = fn()
        except Exception:
            continue
        if isinstance(value, tuple):
            value, metadata[mime] = value[0], value[1]
        if value is not None:
            data[mime] = _jsonable(value)
    data.setdefault("text/plain", repr(obj))
    return data, metadata


def _send_display(data, metadata=None, transient=None, update=False):
    emit({"type": "display", "data": data, "metadata": metadata or {},
          "transient": transient or {}, "update": bool(update)})


def plain_display(*objs, raw=False, display_id=None, update=False, metadata=None, **kwargs):
    transient = {"display_id": display_id} if display_id else {}
    for obj in objs:
        if raw:
            data, md = obj, {}
        else:
            data, md = plain_format(obj)
        _send_display(data, dict(md, **(metadata or {})), transient, update)


def plain_clear_output(wait=False):
    emit({"type": "clear_output", "wait": bool(wait)})


def show_figures(*args, **kwargs):
    """pyplot.show() in a cell: the open figures are displayed here, in order
    with the cell's other output, and closed, as matplotlib-inline does."""
    flush_figures()


def _png_of_figure(fig):
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", bbox_inches="tight")
    return buffer.getvalue()


def _on_pyplot_import(pyplot):
    pyplot.show = show_figures
    # display(fig) shows the figure as an image under IPython, as with %matplotlib inline.
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is not None:  # base64 text, as a frontend receives image/png
        shell.display_formatter.formatters["image/png"].for_type_by_name(
            "matplotlib.figure", "Figure", lambda fig: base64.b64encode(_png_of_figure(fig)).decode("ascii"))


def flush_figures():
    """Sends every open matplotlib figure as image/png (and text/plain), then closes them."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    try:
        nums = plt.get_fignums()
        for num in nums:
            fig = plt.figure(num)
            _send_display({"image/png": base64.b64encode(_png_of_figure(fig)).decode("ascii"),
                           "text/plain": repr(fig)})
        if nums:
            plt.close("all")
    except Exception:
        traceback.print_exc()


# ---------------------------------------------------------------- errors

def without_executor_frames(tb):
    """The traceback chain tb without the executor's own frames (a signal
    handler's, input()'s): user tracebacks show user frames only."""
    frames = []
    while tb is not None:
        if tb.tb_frame.f_code.co_filename != EXECUTOR_FILE:
            frames.append(tb)
        tb = tb.tb_next
    for earlier, later in zip(frames, frames[1:]):
        earlier.tb_next = later
    if frames:
        frames[-1].tb_next = None
    return frames[0] if frames else None


def strip_executor_frames(error, seen=None):
    """Removes the executor's frames from error's traceback and from those of the
    exceptions it chains (__cause__, __context__)."""
    seen = set() if seen is None else seen
    if error is None or id(error) in seen:
        return
    seen.add(id(error))
    error.__traceback__ = without_executor_frames(error.__traceback__)
    strip_executor_frames(error.__cause__, seen)
    strip_executor_frames(error.__context__, seen)


def clean_traceback(etype, evalue, tb):
    """The traceback lines of an exception, without the executor's own frames."""
    frames = [f for f in traceback.extract_tb(tb) if f.filename != EXECUTOR_FILE]
    lines = ["Traceback (most recent call last):\n"] if frames else []
    lines += traceback.format_list(frames)
    lines += traceback.format_exception_only(etype, evalue)
    return [line.rstrip("\n") for line in lines]


def record_error(ename, evalue, tb_lines):
    state.error = {"ename": ename, "evalue": evalue, "traceback": tb_lines}
    emit(dict(type="error", **state.error))


def ask_exit(keep_kernel=False):
    """exit / quit(): the execute_reply carries ipykernel's ask_exit payload, and the
    frontend (jupyter console) leaves; the kernel itself keeps running."""
    if not any(item.get("source") == "ask_exit" for item in state.payload):
        state.payload.append({"source": "ask_exit", "keepkernel": bool(keep_kernel)})


class _Exit:
    """Plain mode's exit and quit: called, or alone on a line, they ask the frontend to leave."""

    def __call__(self, keep_kernel=False):
        ask_exit(keep_kernel)

    def __repr__(self):
        return "Use exit() or quit() to leave this frontend (the kernel keeps running)"


# ---------------------------------------------------------------- backends

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
            exec(compile(tree, filename, "exec"), self.ns)
            value = eval(compile(last, filename, "eval"), self.ns) if last is not None else None
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
            data, metadata = plain_format(value)
            emit_final({"type": "execute_result", "data": data, "metadata": metadata})
        return True

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


# ---------------------------------------------------------------- IPython, lean

# Imported by IPython's own modules at import time but needed only later (an
# error's traceback, asyncio code, !cmd through pexpect): loaded on first use.
_LAZY_MODULES = frozenset({"asyncio", "pexpect", "stack_data", "uuid", "sqlite3"})


class _DeferredJedi:
    """The loader of jedi while IPython is imported: loading fails."""

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        raise ModuleNotFoundError("jedi is loaded at the first completion", name=module.__name__)


class _DeferredImports:
    """While IPython is imported: the modules of _LAZY_MODULES load lazily, and
    jedi looks absent (IPython's completer then starts without it; the first
    completion loads it, see _enable_jedi). IPython.terminal.embed, which pulls
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


def _enable_jedi(shell):
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


def _speed_up_formatters():
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


def _skip_idle_token_transforms(manager):
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


def make_ipython_backend():
    import inspect
    with _DeferredImports():
        from IPython.core.displayhook import DisplayHook
        from IPython.core.displaypub import DisplayPublisher
        from IPython.core.interactiveshell import InteractiveShell
        from traitlets.config import Config

        class Hook(DisplayHook):
            def write_output_prompt(self):
                pass

            def quiet(self):
                # IPython tokenizes the cell to find a trailing ';': no ';' at all, no need.
                history = self.shell.history_manager.input_hist_parsed
                if history and ";" not in history[-1]:
                    return False
                return super().quiet()

            def write_format_data(self, format_dict, md_dict=None):
                msg = {"type": "execute_result", "data": format_dict, "metadata": md_dict or {}}
                if self.shell.result_ends_cell(sys._getframe(2)):
                    emit_final(msg)
                else:
                    emit(msg)

        class Publisher(DisplayPublisher):
            def publish(self, data, metadata=None, source=None, *, transient=None, update=False, **kwargs):
                _send_display(data, metadata, transient, update)

            def clear_output(self, wait=False):
                plain_clear_output(wait)

        class Shell(InteractiveShell):
            _last_node_code = None  # the code of the cell's displayed last expression, while it runs
            _nodes_left = 0

            def _showtraceback(self, etype, evalue, stb):
                record_error(getattr(etype, "__name__", str(etype)), str(evalue), list(stb))

            def _get_exc_info(self, exc_tuple=None):
                etype, value, tb = InteractiveShell._get_exc_info(self, exc_tuple)
                if isinstance(value, BaseException):
                    strip_executor_frames(value)
                    tb = value.__traceback__
                return etype, value, tb

            def ask_exit(self, keep_kernel=False):
                ask_exit(keep_kernel)

            def enable_gui(self, gui=None):
                pass

            def result_ends_cell(self, caller):
                """True when the displayhook was called by the cell's last node itself
                (its trailing expression) and no post-execution callback runs user code."""
                if caller is None or self._last_node_code is None or caller.f_code is not self._last_node_code:
                    return False
                callbacks = self.events.callbacks
                return not callbacks.get("post_execute") and not callbacks.get("post_run_cell")

        if inspect.iscoroutinefunction(InteractiveShell.run_ast_nodes) and \
                inspect.iscoroutinefunction(InteractiveShell.run_code):
            async def run_ast_nodes(self, nodelist, cell_name, interactivity="last_expr", *args, **kwargs):
                saved = self._nodes_left, self._last_node_code
                displayed = interactivity == "last_expr" and nodelist and isinstance(nodelist[-1], ast.Expr)
                self._nodes_left = len(nodelist) if displayed else -1
                try:
                    return await InteractiveShell.run_ast_nodes(self, nodelist, cell_name, interactivity, *args, **kwargs)
                finally:
                    self._nodes_left, self._last_node_code = saved

            async def run_code(self, code_obj, *args, **kwargs):
                if self._nodes_left > 0:
                    self._nodes_left -= 1
                    self._last_node_code = code_obj if self._nodes_left == 0 else None
                return await InteractiveShell.run_code(self, code_obj, *args, **kwargs)

            Shell.run_ast_nodes = run_ast_nodes
            Shell.run_code = run_code

        config = Config()
        config.HistoryManager.enabled = False
        config.HistoryManager.hist_file = ":memory:"
        config.InteractiveShell.colors = "Linux"
        shell = Shell.instance(config=config, displayhook_class=Hook, display_pub_class=Publisher)
    shell.system = shell.system_raw  # !cmd writes to fds 1 and 2 directly: captured like any output
    try:
        _speed_up_formatters()
    except Exception:  # another IPython: its own formatters stay as they are
        pass
    try:
        _skip_idle_token_transforms(shell.input_transformer_manager)
    except Exception:
        pass

    class IPythonBackend:
        name = "ipython"

        def run(self, code, count, silent, store_history):
            if shell.execution_count != count:  # a trait: each set notifies its observers
                shell.execution_count = count
            return shell.run_cell(code, store_history=store_history, silent=silent).success

        def complete(self, code, cursor_pos):
            # As ipykernel does: jedi (static, sees names not yet defined), then IPython's own matchers.
            _enable_jedi(shell)
            from IPython.core.completer import provisionalcompleter, rectify_completions
            try:
                with provisionalcompleter():
                    found = list(rectify_completions(code, shell.Completer.completions(code, cursor_pos)))
            except Exception:
                found = []
            if found:
                return {"matches": [c.text for c in found], "cursor_start": found[0].start,
                        "cursor_end": found[0].end, "status": "ok",
                        "metadata": {"_jupyter_types_experimental": [
                            {"start": c.start, "end": c.end, "text": c.text, "type": c.type} for c in found]}}
            from IPython.utils.tokenutil import line_at_cursor
            line, offset = line_at_cursor(code, cursor_pos)
            text, matches = shell.complete("", line, cursor_pos - offset)
            return {"matches": list(matches), "cursor_start": cursor_pos - len(text),
                    "cursor_end": cursor_pos, "metadata": {}, "status": "ok"}

        def inspect(self, code, cursor_pos, detail_level):
            from IPython.utils.tokenutil import token_at_cursor
            name = token_at_cursor(code, cursor_pos)
            try:
                data = shell.object_inspect_mime(name, detail_level=detail_level)
            except Exception:
                return {"status": "ok", "found": False, "data": {}, "metadata": {}}
            return {"status": "ok", "found": True, "data": data, "metadata": {}}

        def is_complete(self, code):
            status, indent = shell.input_transformer_manager.check_complete(code)
            reply = {"status": status}
            if status == "incomplete":
                reply["indent"] = " " * (indent or 0)
            return reply

    return IPythonBackend()


def make_backend():
    if os.environ.get("GPUBOX_KERNEL_MODE") != "plain":
        try:
            return make_ipython_backend()
        except ImportError:
            pass
    return PlainBackend()


# ---------------------------------------------------------------- import hooks

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


# ---------------------------------------------------------------- comms

class Comms:
    """Jupyter comms (ipywidgets) through the `comm` package: when user code
    imports it, comm.create_comm and comm.get_comm_manager are replaced by ours.
    A comm's messages go to the agent as "comm" frames, in order with output
    (buffers base64); the frontend's comm_open, comm_msg and comm_close reach
    the manager as "comm" requests. Without `comm` importable nothing changes."""

    def __init__(self):
        self.manager = None  # set once `comm` is imported
        AfterImport("comm", self._install)

    def _install(self, comm_module):
        from comm.base_comm import BaseComm, CommManager

        class Comm(BaseComm):
            def publish_msg(self, msg_type, data=None, metadata=None, buffers=None, **keys):
                content = dict(data={} if data is None else data, comm_id=self.comm_id, **keys)
                emit({"type": "comm", "msg_type": msg_type, "content": content, "metadata": metadata or {},
                      "buffers": [base64.b64encode(memoryview(b).tobytes()).decode("ascii") for b in buffers or []]})

            def handle_msg(self, msg):
                # As BaseComm's, without requiring IPython (plain mode): its
                # pre_execute and post_execute events fire around the callback.
                if self._msg_callback:
                    ipython = sys.modules.get("IPython")
                    shell = ipython.get_ipython() if ipython is not None else None
                    if shell:
                        shell.events.trigger("pre_execute")
                    self._msg_callback(msg)
                    if shell:
                        shell.events.trigger("post_execute")

        import logging

        class ErrorsToStderr(logging.Handler):
            """The `comm` package logs a handler's exception with its traceback: the user
            sees it on stderr. Its other records (an unknown target or comm id, as a
            frontend probing for targets causes) stay quiet, as in ipykernel."""

            def emit(self, record):
                if record.exc_info:
                    lines = [record.getMessage()] + clean_traceback(*record.exc_info)
                    sys.stderr.write("\n".join(lines) + "\n")

        logger = logging.getLogger("Comm")
        logger.addHandler(ErrorsToStderr())
        logger.propagate = False
        self.manager = CommManager()
        comm_module.create_comm = Comm
        comm_module.get_comm_manager = lambda: self.manager

    def handle(self, request):
        """A frontend's comm_open, comm_msg or comm_close, dispatched as ipykernel does;
        a comm_open nobody can take (no target, or `comm` never imported) is closed."""
        msg_type = request.get("msg_type")
        if msg_type not in ("comm_open", "comm_msg", "comm_close"):
            return {"type": "reply", "status": "error", "ename": "ValueError", "evalue": "not a comm message: %r" % msg_type}
        content = request.get("content") or {}
        if self.manager is None:
            if msg_type == "comm_open":
                emit({"type": "comm", "msg_type": "comm_close", "metadata": {}, "buffers": [],
                      "content": {"comm_id": content.get("comm_id", ""), "data": {}}})
            return {"type": "reply", "status": "ok"}
        header = request.get("header") or {}
        msg = {"header": header, "msg_id": header.get("msg_id", ""), "msg_type": msg_type,
               "parent_header": request.get("parent_header") or {}, "metadata": request.get("metadata") or {},
               "content": content, "buffers": [memoryview(base64.b64decode(b)) for b in request.get("buffers", [])]}
        global allow_stdin
        allow_stdin = False  # a comm message has no stdin to answer input()
        state.interrupt_pending = False
        state.running = True  # output is acknowledged in order, and SIGINT interrupts the handler
        try:
            getattr(self.manager, msg_type)(None, None, msg)
            _flush_std()
        except KeyboardInterrupt:
            sys.stderr.write("KeyboardInterrupt in a comm handler\n")
        finally:
            state.running = False
        return {"type": "reply", "status": "ok"}

    def info(self, request):
        """comm_info_reply's content: the open comms, of target_name when one is given."""
        target = request.get("target_name")
        comms = self.manager.comms if self.manager is not None else {}
        return {"type": "reply", "status": "ok",
                "comms": {comm_id: {"target_name": c.target_name} for comm_id, c in list(comms.items())
                          if not target or c.target_name == target}}


# ---------------------------------------------------------------- main loop

def execute(backend, request):
    global allow_stdin
    allow_stdin = bool(request.get("allow_stdin", False))
    state.error = None
    state.payload = []
    state.interrupt_pending = False
    ok = False
    state.running = True
    try:
        send({"type": "started"})  # an interrupt that came since the request was sent lands from here on
        ok = backend.run(request["code"], int(request.get("execution_count", 0)),
                         bool(request.get("silent", False)), bool(request.get("store_history", True)))
        flush_figures()
        state.running = False
    except KeyboardInterrupt:
        # It arrived between the cell's end and here (even inside the line above):
        # the cell counts as interrupted, and nothing of it leaks into the next one.
        state.running = False
        if state.error is None:
            record_error("KeyboardInterrupt", "", ["KeyboardInterrupt"])
    ok = ok and state.error is None
    reply = {"type": "done", "status": "ok" if ok else "error"}
    if not ok and state.error is not None:
        reply.update(state.error)
    if state.payload:
        reply["payload"] = state.payload
    return reply


def _watch_between_cells(parent):
    # The agent (or a standalone kernel) is gone: a cell may be spinning and never
    # read the channel again, so watch the parent instead. (Not PR_SET_PDEATHSIG:
    # it fires when the spawning *thread* exits, which may be any worker thread.)
    # Between cells, text a thread printed without a newline is flushed here, so
    # that it goes out as that cell's late output, not with the next cell's.
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            os._exit(0)
        if not state.running:
            _flush_std()


def main():
    os.set_inheritable(CHANNEL_FD, False)
    threading.Thread(target=_watch_between_cells, args=(os.getppid(),), daemon=True, name="between-cells").start()
    os.environ.setdefault("MPLBACKEND", "agg")
    warnings.filterwarnings("ignore", message=".*non-GUI backend.*")
    warnings.filterwarnings("ignore", message=".*is non-interactive, and thus cannot be shown.*")
    signal.signal(signal.SIGINT, _on_sigint)
    builtins.input = _input
    import getpass
    getpass.getpass = _getpass
    sys.stdin = open(os.devnull)
    # Line buffering: one write per printed line (the agent coalesces lines further).
    for stream in (sys.stdout, sys.stderr):
        stream.reconfigure(line_buffering=True, write_through=False)
    comms = Comms()
    backend = make_backend()
    AfterImport("matplotlib.pyplot", _on_pyplot_import)
    send({"type": "ready", "implementation": backend.name,
          "python_version": "%d.%d.%d" % sys.version_info[:3], "pid": os.getpid()})
    handlers = {
        "execute": lambda r: execute(backend, r),
        "complete": lambda r: dict(backend.complete(r["code"], int(r["cursor_pos"])), type="reply"),
        "inspect": lambda r: dict(backend.inspect(r["code"], int(r["cursor_pos"]), int(r.get("detail_level", 0))), type="reply"),
        "is_complete": lambda r: dict(backend.is_complete(r["code"]), type="reply"),
        "comm": comms.handle,
        "comm_info": comms.info,
    }
    while True:
        request = recv()
        handler = handlers.get(request.get("type"))
        try:
            reply = handler(request) if handler else {"type": "reply", "status": "error",
                                                       "ename": "ValueError", "evalue": "unknown request"}
        except KeyboardInterrupt:  # an interrupt that came as a request ended: dropped
            state.running = False
            reply = {"type": "done" if request.get("type") == "execute" else "reply", "status": "error",
                     "ename": "KeyboardInterrupt", "evalue": "", "traceback": ["KeyboardInterrupt"]}
        except Exception as error:
            reply = {"type": "reply", "status": "error", "ename": type(error).__name__, "evalue": str(error),
                     "traceback": clean_traceback(type(error), error, error.__traceback__)}
        send(reply)


main()
