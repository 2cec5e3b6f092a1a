"""Functions served from a sandbox (rpc/PROTOCOL.md, "Served functions").

    lib = gpubox.served.serve(client, "interface.py", "tools")      # a generated module
    lib.add(1, 2)                                                    # runs in the sandbox
    svc = gpubox.served.Service(client, "tools")
    svc.call("scale", torch.ones(4), factor=2.0)                     # tensors both ways
    for item in svc.stream("count", 3): ...                          # a generator function

An exception in a served function raises gpubox.RemoteError (.type,
.remote_message, .remote_traceback). Tensors come back as torch tensors when
torch imports, else numpy arrays; numpy arrays and torch tensors are sent as
raw attachments (no copy of their bytes on this side).
"""

import keyword
import types
from typing import Any, Dict, Iterator, List, Optional

from . import tensor_wire
from ._transport import zmq
from .cli_path import find_cli
from .errors import RpcError

ZERO_COPY_BYTES = 64 << 10  # frames this big are sent from, and received into, tensors without a copy


class RemoteError(RpcError):
    """A served function raised: `type` (e.g. "ValueError"), `remote_message`,
    `remote_traceback` (the sandbox's traceback text, the function's lines in it)."""

    def __init__(self, code: str, message: str, details: Optional[dict] = None):
        super().__init__(code, message, details)
        self.type = self.details.get("type", "")
        self.remote_message = self.details.get("message", "")
        self.remote_traceback = self.details.get("traceback", "")

    def __str__(self) -> str:
        text = super().__str__()
        return text + ("\n\nRemote traceback:\n" + self.remote_traceback if self.remote_traceback else "")


def _raise_remote(error: RpcError) -> None:
    if error.code == "raised":
        raise RemoteError(error.code, error.message, error.details) from None
    raise error


# -- tensors --------------------------------------------------------------------

def _zero_copy(part):
    """A frame sent from the tensor's own memory, not copied into a frame first."""
    return zmq.Frame(part, copy=False) if zmq is not None and len(part) >= ZERO_COPY_BYTES else part


def to_wire(value: Any, frames: List[Any], keep: List[Any]) -> Any:
    """value with each numpy array / torch tensor replaced by its tensor map,
    the bytes appended to frames (views of the tensor's memory, kept alive in keep)."""
    return tensor_wire.to_wire(value, frames, keep, _zero_copy)


def from_wire(value: Any, frames: List[bytes]) -> Any:
    """value with its tensor maps replaced by torch tensors (numpy arrays without torch)."""
    try:
        return tensor_wire.from_wire(value, frames)
    except tensor_wire.TensorWireError as error:
        raise RpcError("internal", "a served result: %s" % error) from None


# -- a service ------------------------------------------------------------------

class Service:
    """A served interface by name, on a Client (same thread rules as the Client)."""

    def __init__(self, client, name: str):
        self.client = client
        self.name = name

    def _params(self, function: str, args, kwargs):
        frames: List[Any] = []
        keep: List[Any] = []
        params = {"service": self.name, "function": function,
                  "args": to_wire(list(args), frames, keep), "kwargs": to_wire(dict(kwargs), frames, keep)}
        return params, frames, keep

    def call(self, function: str, *args: Any, timeout: Optional[float] = None, **kwargs: Any) -> Any:
        """Runs function(*args, **kwargs) in the sandbox and returns its value.
        `timeout` (s) is the call's deadline (`deadline_exceeded`); a keyword
        argument of the function named timeout goes through `kwargs=` of call_with."""
        return self.call_with(function, args, kwargs, timeout=timeout)

    def call_with(self, function: str, args=(), kwargs=None, timeout: Optional[float] = None) -> Any:
        params, frames, keep = self._params(function, args, kwargs or {})
        try:
            with self.client.stream("serve.call", timeout=timeout, params=params, attachments=frames,
                                    zero_copy=True) as stream:
                for _ in stream:
                    pass  # a generator's items: call() returns nothing of them
                result = stream.result
                attachments = stream.result_attachments
        except RpcError as error:
            _raise_remote(error)
        del keep
        return from_wire(result.get("value"), attachments)

    def stream(self, function: str, *args: Any, timeout: Optional[float] = None, **kwargs: Any) -> Iterator[Any]:
        """Iterates a generator function's items as they are produced; closing
        the iterator early cancels the call."""
        return self.stream_with(function, args, kwargs, timeout=timeout)

    def stream_with(self, function: str, args=(), kwargs=None, timeout: Optional[float] = None) -> Iterator[Any]:
        params, frames, keep = self._params(function, args, kwargs or {})
        try:
            with self.client.stream("serve.call", timeout=timeout, params=params, attachments=frames,
                                    zero_copy=True) as stream:
                del keep
                for body, attachments in stream:
                    yield from_wire(body.get("item"), attachments)
        except RpcError as error:
            _raise_remote(error)

    def functions(self) -> List[dict]:
        """The service's FUNCTION descriptions (serve.list)."""
        return self.info()["functions"]

    def info(self) -> dict:
        """This service's serve.list entry: name, path, state, pid, restarts, functions..."""
        for entry in self.client.call("serve.list")["services"]:
            if entry.get("name") == self.name:
                return entry
        raise RpcError("not_found", "no service named %r in the sandbox" % self.name)

    def logs(self, tail_bytes: int = 0) -> dict:
        """The worker's {stdout, stderr} (the last tail_bytes of each; 0: all kept)."""
        return self.client.call("serve.logs", name=self.name, tail_bytes=tail_bytes)

    def stop(self) -> None:
        self.client.call("serve.stop", name=self.name)


# -- serve(): upload, start, expose ------------------------------------------------

def serve(client, interface_path_local: str, name: str, expose_as: str = "library", sandbox_ref: Optional[str] = None,
          remote_dir: Optional[str] = None, restart_limit: Optional[int] = None, timeout: Optional[float] = None):
    """Uploads interface_path_local to REMOTE_DIR/interface.py (default
    /workspace/.gpubox/serve/NAME), starts it (serve.start) and returns, by
    expose_as: "library" a generated module whose functions call the served
    ones; "prompt" Markdown describing them; "mcp" the MCP client config of
    `gpubox mcp --sandbox SANDBOX --service NAME` (needs sandbox_ref).
    A service of that name already running is replaced."""
    if expose_as not in ("library", "prompt", "mcp"):
        raise ValueError("expose_as: expected 'library', 'prompt' or 'mcp', got %r" % (expose_as,))
    if expose_as == "mcp" and not sandbox_ref:
        raise ValueError("expose_as='mcp' needs sandbox_ref (the sandbox id or name the MCP server connects to)")
    with open(interface_path_local, "rb") as f:
        source = f.read()
    remote_dir = remote_dir or "/workspace/.gpubox/serve/%s" % name
    remote_path = remote_dir.rstrip("/") + "/interface.py"
    client.call("fs.write", path=remote_path, data=source, parents=True)
    params = {"name": name, "path": remote_path}
    if restart_limit is not None:
        params["restart_limit"] = restart_limit
    try:
        started = client.call("serve.start", timeout=timeout, params=params)
    except RpcError as error:
        if error.code != "already_exists":
            raise
        client.call("serve.stop", name=name)
        started = client.call("serve.start", timeout=timeout, params=params)
    functions = started["functions"]
    if expose_as == "prompt":
        return prompt_text(name, functions, sandbox_ref)
    if expose_as == "mcp":
        return mcp_config(name, sandbox_ref)
    return library(name, functions, sandbox_ref=sandbox_ref, client=client)


def mcp_config(name: str, sandbox_ref: str) -> dict:
    return {"mcpServers": {name: {"command": find_cli(), "args": ["mcp", "--sandbox", sandbox_ref, "--service", name]}}}


def prompt_text(name: str, functions: List[dict], sandbox_ref: Optional[str] = None) -> str:
    where = " in sandbox `%s`" % sandbox_ref if sandbox_ref else ""
    lines = ["# Service `%s`" % name, "",
             "These Python functions run%s (gpubox served functions). Call them with the generated "
             "library (`lib.FUNCTION(...)`), or `gpubox.served.Service(client, %r).call(\"FUNCTION\", ...)`; "
             "numpy arrays and torch tensors may be passed and returned." % (where, name), ""]
    for fn in functions:
        lines.append("## `%s%s`" % (fn["name"], fn["signature"]))
        lines.append("")
        lines.append(fn.get("doc") or "(no docstring)")
        lines.append("")
        if fn.get("is_generator"):
            lines.append("A generator: `Service.stream(\"%s\", ...)` (or iterating the library function) "
                         "yields its items as they are produced." % fn["name"])
            lines.append("")
        if fn.get("parameters"):
            lines.append("| parameter | kind | type | default |")
            lines.append("| --- | --- | --- | --- |")
            for p in fn["parameters"]:
                lines.append("| `%s` | %s | %s | %s |" % (p["name"], p["kind"], "`%s`" % p["annotation"] if p.get("annotation") else "",
                                                        "`%s`" % p["default"] if "default" in p else ""))
            lines.append("")
        if fn.get("returns"):
            lines.append("Returns `%s`." % fn["returns"])
            lines.append("")
    return "\n".join(lines)


# -- the generated library ---------------------------------------------------------

class _Binding:
    """What a generated module holds: how to reach its service. It connects
    lazily with gpubox.connect(sandbox_ref), or uses the client it was given."""

    def __init__(self, service: str, sandbox_ref: Optional[str], client=None):
        self.service = service
        self.sandbox_ref = sandbox_ref
        self._client = client

    def use(self, client) -> None:
        self._client = client

    def _service(self) -> Service:
        if self._client is None:
            if not self.sandbox_ref:
                raise RpcError("unavailable", "this library has no client: call its connect(client) first")
            from .sandboxes import connect
            self._client = connect(self.sandbox_ref)
        return Service(self._client, self.service)

    def call(self, function: str, args: list, kwargs: dict):
        return self._service().call_with(function, _strip(args), _strip_kwargs(kwargs))

    def stream(self, function: str, args: list, kwargs: dict):
        return self._service().stream_with(function, _strip(args), _strip_kwargs(kwargs))


class _RemoteDefault:
    """A default whose value cannot be written as Python text: the served function's own applies."""

    def __repr__(self) -> str:
        return "<remote default>"


REMOTE_DEFAULT = _RemoteDefault()


def _strip(args: list) -> list:
    if REMOTE_DEFAULT in args:
        args = args[:args.index(REMOTE_DEFAULT)]
    return args


def _strip_kwargs(kwargs: dict) -> dict:
    return {k: v for k, v in kwargs.items() if v is not REMOTE_DEFAULT}


def _namespace() -> dict:
    """What annotation and default text is evaluated in: builtins, typing, torch and numpy when they import."""
    import typing
    space: Dict[str, Any] = {name: getattr(typing, name) for name in typing.__all__}
    space["typing"] = typing
    for module, aliases in (("torch", ("torch",)), ("numpy", ("numpy", "np"))):
        imported = tensor_wire.optional_module(module)
        if imported is not None:
            for alias in aliases:
                space[alias] = imported
    return space


def _evaluates(text: str, space: dict) -> bool:
    try:
        eval(compile(text, "<annotation>", "eval"), dict(space))
        return True
    except Exception:
        return False


def library_source(name: str, functions: List[dict], sandbox_ref: Optional[str]) -> str:
    """The Python text of the generated module (it holds no endpoint and no key)."""
    space = _namespace()
    out = ['"""gpubox served functions of service %r%s (generated by gpubox.served).\n\nconnect(client) to use a'
           ' Client of your own; otherwise the first call connects with gpubox.connect(sandbox)."""' %
           (name, " in sandbox %r" % sandbox_ref if sandbox_ref else ""),
           "from typing import *", "import typing",
           "from gpubox.served import _Binding, REMOTE_DEFAULT",
           "_binding = _Binding(%r, %r)" % (name, sandbox_ref),
           "", "def connect(client):", "    \"\"\"Calls go through this gpubox Client from now on.\"\"\"",
           "    _binding.use(client)", ""]
    for optional in ("torch", "numpy"):
        if optional in space:
            out.insert(3, "import %s%s" % (optional, "\nimport numpy as np" if optional == "numpy" else ""))
    for fn in functions:
        if not fn["name"].isidentifier() or keyword.iskeyword(fn["name"]):
            continue
        params, args, kwargs = [], [], []
        has_var_positional = any(p["kind"] == "var_positional" for p in fn["parameters"])
        star_done = False
        previous_kind = None
        for p in fn["parameters"]:
            kind, pname = p["kind"], p["name"]
            if previous_kind == "positional_only" and kind != "positional_only":
                params.append("/")
            if kind == "keyword_only" and not star_done and not has_var_positional:
                params.append("*")
                star_done = True
            text = pname
            if kind == "var_positional":
                text = "*" + pname
            elif kind == "var_keyword":
                text = "**" + pname
            annotation = p.get("annotation")
            if annotation:
                text += ": " + (annotation if _evaluates(annotation, space) else repr(annotation))
            if "default" in p:
                default = p["default"] if _evaluates(p["default"], space) else "REMOTE_DEFAULT"
                text += (" = " if annotation else "=") + default
            params.append(text)
            previous_kind = kind
            if kind == "positional_only" or (kind == "positional_or_keyword" and has_var_positional):
                args.append(pname)
            elif kind == "positional_or_keyword" or kind == "keyword_only":
                kwargs.append("%r: %s" % (pname, pname))
            elif kind == "var_positional":
                args.append("*" + pname)
            else:
                kwargs.append("**" + pname)
        if previous_kind == "positional_only":
            params.append("/")
        returns = fn.get("returns")
        arrow = ""
        if returns:
            arrow = " -> " + (returns if _evaluates(returns, space) else repr(returns))
        out.append("def %s(%s)%s:" % (fn["name"], ", ".join(params), arrow))
        if fn.get("doc"):
            out.append("    %s" % repr(fn["doc"]))
        call_args = "[%s], {%s}" % (", ".join(args), ", ".join(kwargs))
        if fn.get("is_generator"):
            out.append("    yield from _binding.stream(%r, %s)" % (fn["name"], call_args))
        else:
            out.append("    return _binding.call(%r, %s)" % (fn["name"], call_args))
        out.append("")
    return "\n".join(out) + "\n"


def library(name: str, functions: List[dict], sandbox_ref: Optional[str] = None, client=None) -> types.ModuleType:
    """The generated module of a service: one real def per function, with its
    signature, defaults and docstring. Its source is `module.__gpubox_source__`."""
    source = library_source(name, functions, sandbox_ref)
    module = types.ModuleType("gpubox_served_%s" % name.replace("-", "_").replace(".", "_"))
    module.__gpubox_source__ = source
    exec(compile(source, "<gpubox served %s>" % name, "exec"), module.__dict__)
    if client is not None:
        module.connect(client)
    return module
