"""Sandboxes that the `gpubox` CLI created: found in its state directory.

    import gpubox
    with gpubox.connect("my-sandbox") as client:      # an id, a unique id prefix, or a name
        client.call("proc.exec", argv=["nvidia-smi"])

The store is $XDG_STATE_HOME/gpubox (fallback ~/.local/state/gpubox); each
sandbox's record is sandboxes/ID/sandbox.json, written by the CLI
(host/sandbox_store.h).
"""

import json
import os
from typing import List, Optional

from . import backends
from .client import Client, RpcError


def state_dir() -> str:
    """The CLI's state directory."""
    xdg = os.environ.get("XDG_STATE_HOME", "")
    if xdg.startswith("/"):
        return os.path.join(xdg, "gpubox")
    return os.path.join(os.path.expanduser("~"), ".local", "state", "gpubox")


def _alive(pid: int, start_time: int) -> bool:
    """The agent still runs: same pid, same start time (field 22 of /proc/PID/stat), not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            text = f.read()
    except OSError:
        return False
    fields = text[text.rfind(")") + 2:].split()
    return fields[0] not in ("Z", "X") and int(fields[19]) == start_time


def sandboxes() -> List[dict]:
    """Every sandbox record, each with a "state": "running", "dead" or "creating"."""
    root = os.path.join(state_dir(), "sandboxes")
    records = []
    for entry in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        try:
            with open(os.path.join(root, entry, "sandbox.json")) as f:
                record = json.load(f)
        except (OSError, ValueError):
            continue
        pid = record.get("agent_pid", 0)
        spec = record.get("spec", {})
        traits = backends.backend(record.get("backend", ""))
        if traits and traits.control_plane_id:  # no host process: what the control plane said last (`gpubox ls` asks it)
            ended = traits.control_plane_id[:-len("_id")] + "_ended"
            record["state"] = "dead" if ended in spec else "running" if spec.get(traits.control_plane_id) else "creating"
        else:
            record["state"] = ("creating" if pid <= 0 else
                               "running" if _alive(pid, record.get("agent_start_time", -1)) else "dead")
        records.append(record)
    return sorted(records, key=lambda r: r.get("created_at", 0))


def find(id_or_name: str) -> dict:
    """The record of a sandbox by exact id, exact name or unique id prefix; raises LookupError."""
    records = sandboxes()
    for record in records:
        if id_or_name in (record["id"], record.get("name")):
            return record
    matches = [r for r in records if id_or_name and r["id"].startswith(id_or_name)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise LookupError("%r matches %d sandboxes: give more of the id" % (id_or_name, len(matches)))
    raise LookupError("no sandbox with id or name %r (see gpubox ls)" % id_or_name)


def connect(id_or_name: str, connect_timeout: Optional[float] = 10.0) -> Client:
    """A connected Client for a sandbox the CLI created.

    Raises LookupError for an unknown sandbox and RpcError("unavailable") when
    its agent is dead or does not answer.
    """
    record = find(id_or_name)
    if record["state"] != "running":
        raise RpcError("unavailable", "sandbox %s is %s; `gpubox terminate %s` removes it"
                       % (record["id"], record["state"], record["id"]))
    if not record["endpoint"].startswith("tcp://"):
        return Client(record["endpoint"], connect_timeout=connect_timeout)
    # A container sandbox: CURVE with the keys the CLI keeps beside the record (host/sandbox_keys.h).
    with open(os.path.join(record["dir"], "client_keys.json")) as f:
        keys = json.load(f)
    return Client(record["endpoint"], server_public_key=record["spec"]["server_key"],
                  client_secret_key=keys["secret_key"], client_public_key=keys["public_key"],
                  connect_timeout=connect_timeout)
