"""The IPython backend: an InteractiveShell (magics, !cmd, display formatters, _ and Out) whose displayhook, display publisher and tracebacks send this executor's frames."""

import ast
import sys

from .cells import ask_exit, record_error
from .channel import emit, emit_final
from .deferred_imports import DeferredImports, enable_jedi
from .display import plain_clear_output, send_display
from .ipython_speedups import skip_idle_token_transforms, speed_up_formatters
from .state import run_user_code, run_user_code_async, state
from .tracebacks import clean_traceback, strip_executor_frames


def make_ipython_backend():
    """The backend on a fresh InteractiveShell; ImportError when IPython is not importable."""
    import inspect
    with DeferredImports():
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
                send_display(data, metadata, transient, update)

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
                # Only the node's code is interruptible, not IPython's bookkeeping around it.
                return await run_user_code_async(InteractiveShell.run_code, self, code_obj, *args, **kwargs)

            Shell.run_ast_nodes = run_ast_nodes
            Shell.run_code = run_code
        else:  # an IPython before 7: run_code is a plain function
            def run_code(self, code_obj, *args, **kwargs):
                return run_user_code(InteractiveShell.run_code, self, code_obj, *args, **kwargs)

            Shell.run_code = run_code

        config = Config()
        config.HistoryManager.enabled = False
        config.HistoryManager.hist_file = ":memory:"
        config.InteractiveShell.colors = "Linux"
        shell = Shell.instance(config=config, displayhook_class=Hook, display_pub_class=Publisher)
    shell.system = shell.system_raw  # !cmd writes to fds 1 and 2 directly: captured like any output
    try:
        speed_up_formatters()
    except Exception:  # another IPython: its own formatters stay as they are
        pass
    try:
        skip_idle_token_transforms(shell.input_transformer_manager)
    except Exception:
        pass

    class IPythonBackend:
        name = "ipython"

        def run(self, code, count, silent, store_history):
            if shell.execution_count != count:  # a trait: each set notifies its observers
                shell.execution_count = count
            result = shell.run_cell(code, store_history=store_history, silent=silent)
            error = result.error_before_exec or result.error_in_exec
            if error is not None and state.error is None:
                # IPython failed to show it: its traceback formatter (stack_data) raises on a
                # frame interrupted at its first instruction, before any line. Shown plainly.
                record_error(type(error).__name__, str(error), clean_traceback(type(error), error, error.__traceback__))
            return result.success

        def complete(self, code, cursor_pos):
            # As ipykernel does: jedi (static, sees names not yet defined), then IPython's own matchers.
            enable_jedi(shell)
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
