"""NotebookSession: Seer's notebook session on a gpubox sandbox's own Jupyter
kernel, through the kernel.* RPC methods (rpc/PROTOCOL.md "Kernel"), with
E2B-style streaming callbacks. connection_file() serves the same kernel to
local Jupyter frontends through `gpubox attach`. A session is for one thread,
except interrupt(), which any thread may call."""

import base64
import json
import selectors
import subprocess
from dataclasses import dataclass, field
from typing import Callable, List, Optional

from .cli_path import find_cli
from .sandboxes import connect as _connect
from .sandbox import Sandbox, SandboxError

IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/svg+xml")
MAX_BODY_CODE = 512 * 1024   # longer cells travel as the CALL's attachment


@dataclass
class ExecutionError:
    """A cell's exception: its type name, value and the formatted traceback lines."""

    name: str
    value: str
    traceback: List[str]


@dataclass
class Execution:
    """What a cell produced: streams as text, results (MIME bundles of displays and the
    execute_result, in order), images (bytes: PNG/JPEG/GIF decoded, SVG as UTF-8), error."""

    stdout: str = ""
    stderr: str = ""
    results: List[dict] = field(default_factory=list)
    images: List[bytes] = field(default_factory=list)
    error: Optional[ExecutionError] = None
    execution_count: Optional[int] = None
    died: bool = False
    timed_out: bool = False
    outputs: List[dict] = field(default_factory=list)   # the kernel's DATA items, as they came
    text: Optional[str] = None                          # the execute_result's text/plain

    @property
    def success(self) -> bool:
        return self.error is None and not self.died


def _images(bundle: dict) -> List[bytes]:
    found = []
    for mime in IMAGE_TYPES:
        value = bundle.get(mime)
        if isinstance(value, str):
            found.append(value.encode() if mime == "image/svg+xml" else base64.b64decode(value))
    return found


class NotebookSession:
    """A live kernel of a sandbox: exec() cells, restart(), interrupt(), connection_file()."""

    def __init__(self, sandbox: Sandbox, workspace=None):
        self.sandbox = sandbox
        self.workspace = workspace
        self._attach: Optional[subprocess.Popen] = None
        self._connection_file: Optional[str] = None
        if workspace is not None:
            workspace.install(sandbox)
        sandbox.wait_kernel()
        _raise_for_failed_models(sandbox)
        sandbox._on_terminate(self.close)

    @property
    def session_id(self) -> str:
        """The sandbox's id: the handle `gpubox mcp`'s tools take."""
        return self.sandbox.sandbox_id

    def setup(self, workspace) -> None:
        """Installs one more workspace (Seer's session.setup)."""
        workspace.install(self.sandbox)

    def exec(self, code: str, hidden: bool = False, timeout: Optional[float] = None,
             on_stdout: Optional[Callable[[str], None]] = None, on_stderr: Optional[Callable[[str], None]] = None,
             on_result: Optional[Callable[[dict], None]] = None,
             on_error: Optional[Callable[[ExecutionError], None]] = None) -> Execution:
        """Runs a cell; callbacks get each piece as it arrives (on_result: a MIME bundle dict).
        hidden: no history, no execution count, nothing shown to attached frontends."""
        params = {"hidden": bool(hidden)}
        attachments = ()
        if len(code.encode()) > MAX_BODY_CODE:
            attachments = (code.encode(),)
        else:
            params["code"] = code
        if timeout is not None:
            params["timeout_s"] = float(timeout)
        run = Execution()
        out, err = [], []
        with self.sandbox.client.stream("kernel.execute", params=params, attachments=attachments) as stream:
            for body, _ in stream:
                run.outputs.append(body)
                if "stream" in body:
                    (out if body["stream"] == "stdout" else err).append(body["text"])
                    callback = on_stdout if body["stream"] == "stdout" else on_stderr
                    if callback:
                        callback(body["text"])
                elif body.get("kind") in ("display", "execute_result"):
                    bundle = body.get("data") or {}
                    run.results.append(bundle)
                    run.images += _images(bundle)
                    if body["kind"] == "execute_result":
                        run.text = bundle.get("text/plain")
                    if on_result:
                        on_result(bundle)
                elif body.get("kind") == "error":
                    run.error = ExecutionError(body.get("ename", ""), body.get("evalue", ""), body.get("traceback", []))
            result = stream.result
        run.stdout, run.stderr = "".join(out), "".join(err)
        run.execution_count = result.get("execution_count")
        run.died, run.timed_out = bool(result.get("died")), bool(result.get("timed_out"))
        if result.get("status") == "error" and run.error is None:
            run.error = ExecutionError(result.get("ename", ""), result.get("evalue", ""), result.get("traceback", []))
        if run.error is not None and on_error:
            on_error(run.error)
        return run

    def exec_file(self, path: str, **options) -> Execution:
        """Runs a local Python file's content as one cell."""
        with open(path, encoding="utf-8") as f:
            return self.exec(f.read(), **options)

    def interrupt(self) -> bool:
        """Interrupts the running cell (from any thread: its own connection); False when none ran."""
        with _connect(self.sandbox.sandbox_id) as client:
            return bool(client.call("kernel.interrupt").get("interrupted"))

    def restart(self) -> None:
        """A fresh kernel process: models, workspace and init code are set up again."""
        self.sandbox.client.call("kernel.restart")
        self.sandbox.wait_kernel()

    @property
    def model_info_text(self) -> str:
        """The "Pre-loaded Models" text (hidden models without name or path)."""
        return self.sandbox.client.call("kernel.info").get("model_info", "")

    @property
    def mcp_config(self) -> dict:
        """An MCP client config for `gpubox mcp`, whose tools default to this sandbox."""
        return {"mcpServers": {"gpubox": {"command": find_cli(), "args": ["mcp", "--sandbox", self.session_id]}}}

    def connection_file(self, timeout: float = 60) -> str:
        """A local Jupyter connection file for this kernel (jupyter console --existing FILE,
        nbclient, JupyterLab), served by a `gpubox attach` this session runs until close()."""
        if self._attach is not None and self._attach.poll() is None:
            return self._connection_file
        self._attach = subprocess.Popen([find_cli(), "--json", "attach", self.sandbox.sandbox_id],
                                        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        selector = selectors.DefaultSelector()
        selector.register(self._attach.stdout, selectors.EVENT_READ)
        ready = selector.select(timeout)
        selector.close()
        line = self._attach.stdout.readline() if ready else b""
        try:
            answer = json.loads(line)
            self._connection_file = answer["connection_file"]
        except (ValueError, KeyError, TypeError):
            self.close()
            error = answer.get("error", {}).get("message") if isinstance(locals().get("answer"), dict) else None
            raise SandboxError("gpubox attach did not start: %s" % (error or line.decode(errors="replace").strip()
                                                                   or "no answer"))
        return self._connection_file

    def close(self) -> None:
        """Stops the attach relay, if one runs (the sandbox and its kernel live on)."""
        attach, self._attach = self._attach, None
        if attach is not None:
            if attach.poll() is None:
                attach.terminate()
                try:
                    attach.wait(10)
                except subprocess.TimeoutExpired:
                    attach.kill()
                    attach.wait()
            attach.stdout.close()
        self._connection_file = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _raise_for_failed_models(sandbox: Sandbox) -> None:
    """SandboxError naming each model the kernel could not load, why, and what to do."""
    failed = [m for m in sandbox.client.call("kernel.info").get("models", []) if m.get("status") == "failed"]
    if not failed:
        return
    python = getattr(getattr(sandbox, "config", None), "python", None) or "python3"
    lines = ["%s: %s" % (m.get("name") or "a hidden model (%s)" % m.get("var_name"), m.get("error", "no reason given"))
             for m in failed]
    raise SandboxError("the kernel could not load %s:\n  %s\nThe kernel runs %s: install transformers and torch "
                       "(and peft for an adapter) in it, or name a Python that has them with SandboxConfig(python=...)"
                       % ("a model" if len(failed) == 1 else "%d models" % len(failed), "\n  ".join(lines), python))


def create_notebook_session(sandbox: Sandbox, workspace=None) -> NotebookSession:
    """A notebook session on the sandbox's kernel, with the workspace installed; waits for the models.
    Raises SandboxError when the kernel could not load one of them, naming it and why."""
    return NotebookSession(sandbox, workspace)
