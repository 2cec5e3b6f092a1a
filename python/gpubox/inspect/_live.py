"""The sandboxes this process's provider made and has not ended, so that none
outlives an eval: task_cleanup ends a sample's leftovers, and this process's
exit ends the rest (`inspect sandbox cleanup gpubox` finds any still left by
name)."""

import atexit
import threading
from typing import Dict, List, Optional

from ..sandbox import SandboxError
from ..sandboxes import find
from ._cli import run_cli


# settle()'s scope for every sandbox, whatever made it.
ANY_SCOPE = object()


class Live:
    """The sandboxes this process created and has not ended (id -> the sandbox lifecycle scope of the
    eval batch that made it), and the creates in flight. A create cancelled halfway still finishes on its
    thread and lands here, so the batch's task_cleanup, or this process's exit, ends it. Keyed by scope,
    not task name: Inspect's run calls task_cleanup once per config at the batch's end, as task "shutdown"."""

    def __init__(self):
        self._changed = threading.Condition()
        self._ids: Dict[str, object] = {}
        self._creating = 0

    def begin_create(self):
        with self._changed:
            self._creating += 1

    def end_create(self, sandbox_id: Optional[str], scope: object):
        with self._changed:
            self._creating -= 1
            if sandbox_id:
                self._ids[sandbox_id] = scope
            self._changed.notify_all()

    def forget(self, sandbox_ids: List[str]):
        with self._changed:
            for sandbox_id in sandbox_ids:
                self._ids.pop(sandbox_id, None)

    def settle(self, scope: object = ANY_SCOPE, timeout: float = 900) -> List[str]:
        """Waits until no create is in flight; the live ids (of scope, or all)."""
        with self._changed:
            self._changed.wait_for(lambda: self._creating == 0, timeout)
            return [i for i, s in self._ids.items() if scope is ANY_SCOPE or s is scope]


live = Live()


def terminate(ids: List[str]) -> None:
    """Ends these sandboxes; one already gone is fine (the CLI ends the others, then names it)."""
    if not ids:
        return
    try:
        run_cli("terminate", *ids, timeout=300)
    except SandboxError:
        if any(_recorded(sandbox_id) for sandbox_id in ids):
            raise
    finally:
        live.forget(ids)


def _recorded(sandbox_id: str) -> bool:
    try:
        find(sandbox_id)
        return True
    except LookupError:
        return False


@atexit.register
def _end_leftovers():
    try:
        terminate(live.settle(timeout=60))
    except Exception:
        pass  # `inspect sandbox cleanup gpubox` still finds them by name
