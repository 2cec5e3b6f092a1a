"""gpubox's Modal backend: sandboxes on Modal through Modal's official SDK.

    python -m gpubox.modal_backend create|terminate|info|ls|adopt|snapshot

reads one JSON request on stdin (never argv: the agent's config holds its
CURVE secret key) and prints one JSON object on stdout: the result, or
{"error": {"code", "message"}} with exit status 2 (usage: no `modal`
package, no token, a bad request) or 1 (Modal or the sandbox failed). The
`gpubox` CLI runs it for the Modal-specific steps of create, terminate, info,
ls --remote and snapshot; everything else goes through the agent's RPC port,
a raw TCP tunnel (`unencrypted_ports`) secured by CURVE. The Python API can
call create() and the others directly.

A sandbox's image is any registry image with the static agent added by the
SDK (`Image.add_local_file(..., copy=True)`) and its ENTRYPOINT cleared, so
that the sandbox's arguments (the agent's path) make the agent PID 1. The
agent's config travels as an ephemeral Modal Secret (GPUBOX_CONFIG, base64
JSON), which the agent reads and removes from its children's environment.
One thread.
"""

import base64
import json
import math
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

from .control_plane import BackendError, await_agent, run_command, usage_error

AGENT_PORT = 7000
AGENT_IN_IMAGE = "/usr/local/bin/gpubox-agent"
WORKDIR = "/workspace"
DEFAULT_APP = "gpubox"
# A CUDA + PyTorch image from Docker Hub; any image works, as the agent is static.
DEFAULT_IMAGE = "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"
TAG = "gpubox.sandbox"  # the tag holding the gpubox id of each sandbox this backend starts
INSTALL_HINT = "pip install 'modal>=1.6,<1.7' (or pip install 'gpubox[modal]')"
TOKEN_HINT = "`modal token new` (or set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET)"


def sdk():
    """The `modal` package, with a token configured; BackendError "usage" saying what to run otherwise."""
    try:
        import modal
        from modal.config import config
    except ImportError:
        raise BackendError("usage", "the Modal backend needs Modal's SDK, which is not installed for %s: %s"
                           % (sys.executable, INSTALL_HINT)) from None
    if not config.get("token_id") or not config.get("token_secret"):
        raise BackendError("usage", "no Modal token is configured: run %s" % TOKEN_HINT)
    return modal


def agent_config_secret(agent_config: Dict[str, Any]) -> Dict[str, str]:
    """The environment the agent's config travels in: GPUBOX_CONFIG, base64 of its JSON."""
    text = json.dumps(agent_config, separators=(",", ":"))
    return {"GPUBOX_CONFIG": base64.b64encode(text.encode()).decode("ascii")}


def sandbox_arguments(request: Dict[str, Any], modal) -> Tuple[Tuple[str, ...], Dict[str, Any], Dict[str, Any]]:
    """Modal.Sandbox.create's (args, kwargs) for a create request, and notes for `info`.

    `modal` is the SDK module (a stand-in in unit tests). Bad fields raise
    BackendError "usage" naming the field; nothing is created here but SDK
    objects, which are lazy until Sandbox.create resolves them.
    """
    agent = request.get("agent")
    if not isinstance(agent, str) or not agent.startswith("/"):
        usage_error("agent: expected the absolute path of the static gpubox-agent, got %r" % (agent,))
    config = request.get("agent_config")
    if not isinstance(config, dict):
        usage_error("agent_config: expected an object")
    image_ref = request.get("image") or DEFAULT_IMAGE
    # A snapshot's image (snapshot_filesystem) holds the sandbox's files; the agent is added again, so it is this CLI's.
    base = modal.Image.from_id(request["from_snapshot"]) if request.get("from_snapshot") else modal.Image.from_registry(image_ref)
    # As image/Dockerfile does: the agent, no ENTRYPOINT of the image's own, /workspace as cwd and HOME.
    image = (base.add_local_file(agent, AGENT_IN_IMAGE, copy=True)
             .entrypoint([]).workdir(WORKDIR).env({"HOME": WORKDIR}))
    kwargs: Dict[str, Any] = {"image": image, "unencrypted_ports": [AGENT_PORT]}
    notes: Dict[str, Any] = {"image": request.get("from_snapshot") or image_ref}

    secrets = [modal.Secret.from_dict(agent_config_secret(config))]
    for name in request.get("modal_secrets", []):
        if not isinstance(name, str) or not name:
            usage_error("modal_secrets: expected names of Modal secrets, got %r" % (name,))
        secrets.append(modal.Secret.from_name(name))
    kwargs["secrets"] = secrets
    env = request.get("env") or {}
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        usage_error("env: expected an object of strings")
    if env:
        kwargs["env"] = dict(env)

    timeout = request.get("timeout_s")
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 1 <= timeout <= 86400:
            usage_error("timeout_s: Modal's container timeout is 1 to 86400 seconds, got %r" % (timeout,))
        kwargs["timeout"] = int(math.ceil(timeout))
    if request.get("gpu"):
        kwargs["gpu"] = str(request["gpu"])
    if request.get("cpu") is not None:
        kwargs["cpu"] = float(request["cpu"])
    if request.get("memory_mib") is not None:
        kwargs["memory"] = int(request["memory_mib"])
    region = request.get("region")
    if region:
        regions = [r for r in str(region).split(",") if r]
        kwargs["region"] = regions[0] if len(regions) == 1 else regions
    volumes = {}
    for volume in request.get("volumes", []):
        name, path = volume.get("name"), volume.get("path")
        if not isinstance(name, str) or not name or not isinstance(path, str) or not path.startswith("/"):
            usage_error("volumes: expected NAME:/absolute/path, got %r" % (volume,))
        volumes[path] = modal.Volume.from_name(name, create_if_missing=True)
    if volumes:
        kwargs["volumes"] = volumes

    network = request.get("network", "none")  # closed unless asked for by name
    if network == "none":
        # Modal refuses block_network with open ports, and the agent's tunnel is one.
        kwargs["outbound_cidr_allowlist"] = []
        notes["network"] = "none (outbound_cidr_allowlist=[]: Modal refuses block_network with a tunnel port)"
    elif network == "allow":
        cidrs = request.get("cidrs") or []
        if not cidrs or not all(isinstance(c, str) and "/" in c for c in cidrs):
            usage_error("cidrs: --network allow needs CIDRs such as 10.0.0.0/8, got %r" % (cidrs,))
        kwargs["outbound_cidr_allowlist"] = list(cidrs)
        notes["network"] = "outbound only to " + ",".join(cidrs) + " (outbound_cidr_allowlist)"
    elif network == "open":
        notes["network"] = "open (Modal's default outbound network)"
    else:
        usage_error("network: expected none, allow or open, got %r" % (network,))
    if request.get("name"):
        kwargs["name"] = str(request["name"])
    tags = dict(request.get("tags") or {})
    if request.get("gpubox_id"):
        tags[TAG] = str(request["gpubox_id"])
    if tags:
        kwargs["tags"] = tags
    return (AGENT_IN_IMAGE,), kwargs, notes


def _app(modal, request):
    name = request.get("app") or DEFAULT_APP
    return modal.App.lookup(name, create_if_missing=True)


def _exit_reason(modal, sandbox) -> Optional[Dict[str, Any]]:
    """None while the sandbox runs, else {"exit_code", "reason"} as Modal reports it."""
    code = sandbox.poll()
    if code is None:
        return None
    reason = "exited with status %d" % code
    # The SDK keeps Modal's GenericResult (status, exception) on its implementation object.
    result = getattr(getattr(sandbox, "_impl", None), "result", None)
    exception = getattr(result, "exception", "") if result is not None else ""
    if exception:
        reason += ": " + str(exception)
    return {"exit_code": code, "reason": reason}


def _not_ready(ended: Dict[str, Any]) -> BackendError:
    return BackendError("failed", "the sandbox's agent %s before it was ready (gpubox runs %s as PID 1 in place of the "
                        "image's ENTRYPOINT; see docs/modal.md)" % (ended["reason"], AGENT_IN_IMAGE))


def _tunnel(sandbox, modal, timeout: float) -> Tuple[str, int]:
    """The agent port's raw TCP tunnel (host, port); a sandbox that ended first says how."""
    try:
        return sandbox.tunnels(timeout=int(max(1, timeout)))[AGENT_PORT].tcp_socket
    except Exception:
        ended = _exit_reason(modal, sandbox)
        if ended:
            raise _not_ready(ended) from None
        raise


def _await_agent(sandbox, endpoint: str, request: Dict[str, Any], modal) -> None:
    """Returns once the agent answers sys.ping through the tunnel; BackendError when it exits or the time is up."""
    def check_ended():
        ended = _exit_reason(modal, sandbox)
        if ended:
            raise _not_ready(ended)
    await_agent(endpoint, request.get("server_public_key"), request.get("client_keys") or {},
                float(request.get("ready_timeout_s", 120)), check_ended)


def create(request: Dict[str, Any]) -> Dict[str, Any]:
    """Starts a sandbox and waits for its agent; on any failure terminates what it started."""
    modal = sdk()
    args, kwargs, notes = sandbox_arguments(request, modal)
    if not request.get("server_public_key") or not (request.get("client_keys") or {}).get("secret_key"):
        usage_error("server_public_key and client_keys: the CURVE keys the host connects with are required")
    started = time.monotonic()
    app = _app(modal, request)
    sandbox = modal.Sandbox.create(*args, app=app, **kwargs)
    try:
        host, port = _tunnel(sandbox, modal, float(request.get("ready_timeout_s", 120)))
        endpoint = "tcp://%s:%d" % (host, port)
        _await_agent(sandbox, endpoint, request, modal)
    except BaseException:
        try:
            sandbox.terminate()
        except Exception:
            pass
        raise
    return {"modal_id": sandbox.object_id, "app": request.get("app") or DEFAULT_APP, "app_id": app.app_id,
            "endpoint": endpoint, "tunnel": "%s:%d" % (host, port), "ready_s": round(time.monotonic() - started, 3),
            "gpu": kwargs.get("gpu", ""), "region": kwargs.get("region", ""), "timeout_s": kwargs.get("timeout"),
            **notes}


def _sandbox(modal, request):
    modal_id = request.get("modal_id")
    if not isinstance(modal_id, str) or not modal_id:
        usage_error("modal_id: expected a Modal sandbox id (sb-...)")
    return modal.Sandbox.from_id(modal_id)


def terminate(request: Dict[str, Any]) -> Dict[str, Any]:
    """Ends the Modal sandbox. The CLI has asked its agent to shut down first:
    with wait_s, waits that long for the sandbox to end by itself (the agent
    is PID 1) before terminating it."""
    modal = sdk()
    sandbox = _sandbox(modal, request)
    give_up = time.monotonic() + float(request.get("wait_s", 0))
    ended = _exit_reason(modal, sandbox)
    while ended is None and time.monotonic() < give_up:
        time.sleep(0.25)
        ended = _exit_reason(modal, sandbox)
    if ended is None:
        sandbox.terminate()
    return {"modal_id": sandbox.object_id, "terminated": ended is None, "ended": ended}


def _state(modal, modal_id: str) -> Dict[str, Any]:
    try:
        sandbox = modal.Sandbox.from_id(modal_id)
        ended = _exit_reason(modal, sandbox)
    except modal.exception.NotFoundError as e:
        return {"state": "dead", "ended": {"exit_code": None, "reason": "Modal does not know it (%s)" % e}}
    return {"state": "dead" if ended else "running", "ended": ended}


def info(request: Dict[str, Any]) -> Dict[str, Any]:
    """Modal's view of sandboxes (modal_ids, or one modal_id): running, or dead with exit code and reason."""
    modal = sdk()
    ids = request.get("modal_ids")
    if ids is None:
        ids = [request.get("modal_id")]
    if not isinstance(ids, list) or not all(isinstance(i, str) and i for i in ids):
        usage_error("modal_ids: expected Modal sandbox ids (sb-...)")
    return {"sandboxes": {modal_id: _state(modal, modal_id) for modal_id in ids}}


def adopt(request: Dict[str, Any]) -> Dict[str, Any]:
    """A running sandbox started elsewhere (or before a host restart): its tunnel, checked with the given keys."""
    modal = sdk()
    sandbox = _sandbox(modal, request)
    ended = _exit_reason(modal, sandbox)
    if ended:
        usage_error("modal_id: sandbox %s has ended (%s)" % (request["modal_id"], ended["reason"]))
    host, port = _tunnel(sandbox, modal, float(request.get("ready_timeout_s", 60)))
    endpoint = "tcp://%s:%d" % (host, port)
    _await_agent(sandbox, endpoint, request, modal)
    return {"modal_id": sandbox.object_id, "endpoint": endpoint, "tunnel": "%s:%d" % (host, port),
            "tags": sandbox.get_tags()}


def ls(request: Dict[str, Any]) -> Dict[str, Any]:
    """The app's running sandboxes that carry gpubox's tag."""
    modal = sdk()
    app = _app(modal, request)
    found = []
    for sandbox in modal.Sandbox.list(app_id=app.app_id, tags=request.get("tags") or None):
        tags = sandbox.get_tags()
        if TAG in tags:
            found.append({"modal_id": sandbox.object_id, "gpubox_id": tags[TAG], "tags": tags})
    return {"app": request.get("app") or DEFAULT_APP, "sandboxes": found}


def snapshot(request: Dict[str, Any]) -> Dict[str, Any]:
    """The sandbox's filesystem as a Modal image (Volumes excluded), restored with from_snapshot in a create request."""
    modal = sdk()
    sandbox = _sandbox(modal, request)
    if _exit_reason(modal, sandbox):
        usage_error("modal_id: sandbox %s has ended: nothing to snapshot" % request["modal_id"])
    image = sandbox.snapshot_filesystem(timeout=int(request.get("timeout_s", 300)))
    return {"image_id": image.object_id}


COMMANDS = {"create": create, "terminate": terminate, "info": info, "ls": ls, "adopt": adopt, "snapshot": snapshot}


def _describe(error: Exception) -> str:
    """An error of Modal's SDK (AuthError, NotFoundError, InvalidError, ...) as one line."""
    message = "Modal: %s: %s" % (type(error).__name__, error)
    return message + (" (run %s)" % TOKEN_HINT if type(error).__name__ == "AuthError" else "")


def main(argv: List[str]) -> int:
    return run_command("gpubox.modal_backend", COMMANDS, argv, _describe)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
