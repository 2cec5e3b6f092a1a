"""What the control-plane backends' modules share (modal_backend.py,
kubernetes_backend.py): their error, the wait for a new sandbox's agent, and
the `python -m gpubox.NAME_backend COMMAND < REQUEST.json` protocol the
`gpubox` CLI speaks with them (host/backends/python_module.h): one JSON
object on stdout, the result or {"error": {"code", "message"}}, exit 2 for a
usage error (nothing was created), 1 for a failure. One thread."""

import json
import sys
import time
from typing import Any, Callable, Dict, List, Optional


class BackendError(Exception):
    """A failure with what to do about it; `code` is "usage" (exit 2) or "failed" (exit 1)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def usage_error(message: str):
    raise BackendError("usage", message)


def await_agent(endpoint: str, server_key: str, client_keys: Dict[str, str], timeout_s: float,
                check_ended: Optional[Callable[[], None]] = None) -> None:
    """Returns once the agent at endpoint answers sys.ping with these CURVE keys; BackendError when the
    time is up or the agent refuses the key. check_ended raises when the sandbox ended meanwhile."""
    from .client import Client, RpcError
    give_up = time.monotonic() + timeout_s
    last = "no answer"
    while True:
        if check_ended:
            check_ended()
        left = give_up - time.monotonic()
        if left <= 0:
            raise BackendError("failed", "the sandbox's agent did not answer sys.ping on %s within %g s (%s)"
                               % (endpoint, timeout_s, last))
        try:
            with Client(endpoint, server_public_key=server_key, client_secret_key=client_keys.get("secret_key"),
                        client_public_key=client_keys.get("public_key"), connect_timeout=min(left, 2.0)) as client:
                client.call("sys.ping", timeout=min(left, 5.0))
                return
        except RpcError as e:
            last = e.message
            if e.code == "permission_denied":
                raise BackendError("failed", e.message) from None


def run_command(module: str, commands: Dict[str, Callable[[Dict[str, Any]], Dict[str, Any]]], argv: List[str],
                describe_failure: Callable[[Exception], str]) -> int:
    """Runs one command on the JSON request on stdin and prints its one JSON line; the exit status.
    describe_failure words an error of the platform's SDK (one the module did not raise as BackendError)."""
    def answer(result, status):
        print(json.dumps(result))
        return status
    if len(argv) != 1 or argv[0] not in commands:
        return answer({"error": {"code": "usage", "message": "usage: python -m %s %s < REQUEST.json"
                                 % (module, "|".join(commands))}}, 2)
    try:
        request = json.loads(sys.stdin.read() or "{}")
        if not isinstance(request, dict):
            usage_error("the request on stdin must be a JSON object")
        return answer(commands[argv[0]](request), 0)
    except BackendError as e:
        return answer({"error": {"code": e.code, "message": e.message}}, 2 if e.code == "usage" else 1)
    except json.JSONDecodeError as e:
        return answer({"error": {"code": "usage", "message": "the request on stdin is not JSON: %s" % e}}, 2)
    except Exception as e:  # the SDK's own errors
        return answer({"error": {"code": "failed", "message": describe_failure(e)}}, 1)
