"""The `gpubox` CLI as the provider runs it: in a session of its own, so a
Ctrl-C at the terminal reaches Inspect, whose cleanup ends what was created,
and never a create halfway."""

import functools
from typing import Optional

from ..sandbox import SandboxError, run_cli as _run_cli

run_cli = functools.partial(_run_cli, own_session=True)


def ended_message(sandbox_id: str) -> Optional[str]:
    """How the sandbox ended ("deadline: its --timeout (60 s) ran out"), or None while it runs."""
    try:
        info = run_cli("info", sandbox_id, timeout=60)
    except SandboxError as error:
        return str(error)  # gone altogether (terminated, or its record removed)
    if info.get("state") == "running":
        return None
    ended = info.get("ended") or {}
    return "%s: %s" % (ended.get("reason", info.get("state", "dead")), ended.get("message", "the agent is not running"))
