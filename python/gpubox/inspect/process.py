"""Commands for the provider: one exec over proc.exec (or proc.spawn, when the
input is too large for one message), the prerequisites of task_init, and the
harvest of a sandbox's job outputs. Blocking: called on worker threads."""

import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from typing import Dict, List, Optional, Union

from ..cli_path import find_cli
from ..client import Client, RpcError
from ..sandbox import INLINE_BYTES, write_bytes
from ._cli import run_cli
from .config import GpuboxSandboxConfig

# `user` runs the command through this, by its absolute path: never found through the image's PATH,
# which the default user may be able to write to (Inspect's exec contract).
RUNUSER = "/usr/sbin/runuser"
STDIN_CHUNK = 256 * 1024
# An argv longer than a CALL's body holds (1 MiB) goes through a file: bash reads it, NUL-separated,
# removes it and execs it (argv[0] of the script is the file).
ARGV_INLINE_BYTES = 512 * 1024
_ARGV_FROM_FILE = 'mapfile -d "" -t argv < "$0" && rm -f -- "$0" && exec "${argv[@]}"'


@dataclass
class ExecRequest:
    """One exec of Inspect's interface, in the sandbox's terms (cwd already absolute)."""

    cmd: List[str]
    input: Union[str, bytes, None]
    cwd: str
    env: Optional[Dict[str, str]]
    user: Optional[str]
    timeout: Optional[float]
    output_limit: int

    def argv(self) -> List[str]:
        return [RUNUSER, "-u", self.user, "--", *self.cmd] if self.user is not None else list(self.cmd)

    def params(self, argv: List[str]) -> dict:
        params = {"argv": argv, "cwd": self.cwd, "max_output_bytes": self.output_limit}
        if self.env:
            params["env"] = dict(self.env)
        if self.timeout is not None:
            params["timeout_s"] = float(self.timeout)
        return params

    def input_bytes(self) -> bytes:
        if self.input is None:
            return b""
        return self.input.encode("utf-8") if isinstance(self.input, str) else bytes(self.input)


@dataclass
class ExecOutcome:
    """What the command did: its shell-style code (128 + N for signal N), its output decoded."""

    returncode: int
    stdout: str
    stderr: str
    timed_out: bool
    truncated: bool


def run(client: Client, request: ExecRequest) -> ExecOutcome:
    """Runs request to its end. A program that is not there is code 127 with the agent's message on stderr
    (as a shell says it); one that cannot be executed raises PermissionError."""
    data = request.input_bytes()
    argv = request.argv()
    if sum(len(a.encode()) + 8 for a in argv) > ARGV_INLINE_BYTES:
        argv = _argv_through_file(client, argv)
    try:
        if len(data) <= INLINE_BYTES:
            params = request.params(argv)
            if data:
                params["stdin"] = data
            result = client.call("proc.exec", params=params)
            stdout, stderr = bytes(result["stdout"]), bytes(result["stderr"])
        else:
            result, stdout, stderr = _run_streaming(client, request.params(argv), request.output_limit, data)
    except RpcError as error:
        if error.code == "not_found":
            return ExecOutcome(127, "", error.message + "\n", False, False)
        if error.code == "permission_denied":
            raise PermissionError(error.message) from None
        raise
    code = result["exit_code"] if result.get("exit_code") is not None else 128 + (result.get("signal") or 0)
    truncated = bool(result.get("stdout_truncated") or result.get("stderr_truncated"))
    return ExecOutcome(code, stdout.decode("utf-8", errors="replace"), stderr.decode("utf-8", errors="replace"),
                       bool(result.get("timed_out")), truncated)


def _argv_through_file(client: Client, argv: List[str]) -> List[str]:
    """An argv for the agent that runs argv, which is too long for one message, from a file."""
    path = "/tmp/.gpubox-inspect-argv-%s" % secrets.token_hex(8)
    write_bytes(client, path, b"".join(a.encode() + b"\0" for a in argv), mode=0o600, parents=False)
    return ["/bin/bash", "-c", _ARGV_FROM_FILE, path]


def _run_streaming(client: Client, params: dict, limit: int, data: bytes):
    """proc.spawn, its stdin sent in chunks as the agent grants credit; output kept up to limit."""
    output = {"stdout": bytearray(), "stderr": bytearray()}
    over = {"stdout": False, "stderr": False}
    with client.stream("proc.spawn", params=params) as stream:
        for at in range(0, len(data), STDIN_CHUNK):
            stream.send({"stdin": data[at:at + STDIN_CHUNK]})
        stream.send({"eof": True})
        for body, frames in stream:
            name = body.get("stream") if isinstance(body, dict) else None
            if name not in output:
                continue
            chunk = b"".join(bytes(f) for f in frames)
            room = limit - len(output[name])
            output[name] += chunk[:max(room, 0)]
            over[name] = over[name] or len(chunk) > room
        result = dict(stream.result)
    result["stdout_truncated"] = result.get("stdout_truncated") or over["stdout"]
    result["stderr_truncated"] = result.get("stderr_truncated") or over["stderr"]
    return result, bytes(output["stdout"]), bytes(output["stderr"])


def check_prerequisites(config: GpuboxSandboxConfig) -> None:
    """task_init's checks: the CLI is there; a container backend's engine is, and has the image
    (pulled once here when it does not). RuntimeError naming what is missing."""
    find_cli()
    if config.backend not in ("podman", "docker"):
        return
    engine = shutil.which(config.backend)
    if engine is None:
        raise RuntimeError("the gpubox sandbox's backend %r needs %s, which is not on PATH"
                           % (config.backend, config.backend))
    for each in [config] + list(config.environments.values()):
        image = each.image or "gpubox:latest"
        if subprocess.run([engine, "image", "inspect", image], capture_output=True).returncode == 0:
            continue
        pulled = subprocess.run([engine, "pull", image], capture_output=True, text=True)
        if pulled.returncode != 0:
            raise RuntimeError("the image %s is not in %s and could not be pulled (%s); build it from "
                               "image/Dockerfile (image/README.md)" % (image, config.backend,
                                                                       pulled.stderr.strip()[-500:]))


def harvest_jobs(sandbox_id: str, into: str) -> Dict[str, str]:
    """Downloads each finished job's outputs and logs into INTO/JOB_ID (`gpubox result`: out/, stdout.log,
    stderr.log); a job already there is not downloaded again. {JOB_ID: its status ("succeeded", "failed",
    "timed_out", ...)} of the jobs now in INTO, in submission order."""
    harvested = {}
    for job in run_cli("jobs", sandbox_id):  # a list of job records: {"job_id", "state", "status", ...}
        job_id = job["job_id"]
        if job.get("state") != "finished":
            continue
        target = os.path.join(into, job_id)
        if not os.path.isdir(target):
            os.makedirs(into, exist_ok=True)
            try:
                run_cli("result", sandbox_id, job_id, "--out", target, timeout=1800)  # target must not exist yet
            except BaseException:
                shutil.rmtree(target, ignore_errors=True)  # half a download is not a harvest: the next one retries
                raise
        harvested[job_id] = job.get("status", "")
    return harvested


# Where code in the sandbox reaches its agent (GPUBOX_ENDPOINT): the agent's state dir is /run/gpubox, or on
# Modal /run/gpubox/ID; container and Modal agents listen there only with a model host.
def inner_endpoint(client: Client, sandbox_id: str) -> Optional[str]:
    """The agent's ipc:// endpoint as the sandbox's own processes see it, or None when it has none."""
    for path in ("/run/gpubox/rpc.sock", "/run/gpubox/%s/rpc.sock" % sandbox_id):
        try:
            if client.call("fs.stat", path=path).get("type") == "other":  # a socket
                return "ipc://" + path
        except RpcError as error:
            if error.code not in ("not_found", "permission_denied"):
                raise
    return None
