"""gpubox: a Python client for the gpubox agent's RPC protocol (rpc/PROTOCOL.md).

    import gpubox
    with gpubox.Client("ipc:///run/gpubox/rpc.sock") as client:
        client.call("sys.ping", hello="world")        # {"pong": True, "echo": {...}}
        out = client.call("proc.exec", argv=["uname", "-a"], timeout=30)
        with client.stream("proc.spawn", shell="cat") as stream:
            stream.send({"stdin": b"hi\\n"})
            stream.send({"eof": True})
            for chunk in stream:                         # Chunk(body, attachments)
                ...
            stream.result                                # {"exit_code": 0, ...}

Over tcp:// the agent's CURVE public key is required:

    client = gpubox.Client("tcp://10.0.0.5:7000", server_public_key=AGENT_PUBLIC,
                           client_secret_key=MY_SECRET)

A sandbox the `gpubox` CLI created, by id or name:

    with gpubox.connect("my-sandbox") as client:
        client.call("sys.info")

The model host's models (gpubox.models):

    model = client.model("tiny")
    model.forward(ids=[1, 2, 3])["logits"]       # a torch tensor (numpy without torch)
    model.generate("Hello", max_new_tokens=8)["text"]

Failures raise gpubox.RpcError (with .code, .message, .details). A Client is
for one thread. Needs pyzmq and msgpack; without them (a sandbox's kernel on a bare
image) an ipc:// endpoint is reached in pure Python.
"""

from .client import Chunk, Client, RpcError, Stream, keygen
from .models import Model, tensor_from_wire
from .sandboxes import connect, find, sandboxes, state_dir
from .protocol import DEFAULT_WINDOW, ERROR_CODES, VERSION, Kind
from . import served
from .served import RemoteError

__all__ = ["Model", "tensor_from_wire", "Chunk", "Client", "RpcError", "Stream", "keygen", "connect", "find", "sandboxes", "state_dir", "DEFAULT_WINDOW", "ERROR_CODES", "VERSION", "Kind", "served", "RemoteError"]

# The Seer-style API (docs/python.md): sandboxes from a config, notebook sessions, scoped sandboxes.
from .config import HostedModel, ModelConfig, RepoConfig, SandboxConfig
from .sandbox import BudgetExceeded, ExecResult, Sandbox, SandboxError, Snapshot
from .workspace import Library, Workspace
from .notebook import Execution, ExecutionError, NotebookSession, create_notebook_session
from .scoped import ScopedSandbox

__all__ += ["HostedModel", "ModelConfig", "RepoConfig", "SandboxConfig", "ExecResult", "Sandbox", "SandboxError", "BudgetExceeded", "Snapshot",
            "Library", "Workspace", "Execution", "ExecutionError", "NotebookSession", "create_notebook_session",
            "ScopedSandbox"]
