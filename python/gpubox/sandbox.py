"""Sandbox: Seer's Sandbox on gpubox. start() runs the `gpubox` CLI's create
(docs/config.md for the agent config it passes), then speaks RPC to the agent
(gpubox.connect) for commands and files, and copies, installs and clones what
the config asks for. A Sandbox, like its Client, is for one thread."""

import hashlib
import json
import os
import posixpath
import re
import secrets as _random
import subprocess
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Union

from . import plan as _plan
from .cli_path import find_cli
from .client import Client
from .config import SandboxConfig
from .sandboxes import connect as _connect, find as _find

# Where a relative sandbox path is, as for the CLI's put/get and MCP's file tools.
WORKSPACE = "/workspace"


def sandbox_path(path: str) -> str:
    """path in the sandbox: an absolute path as it is, a relative one under /workspace."""
    return path if path.startswith("/") else posixpath.join(WORKSPACE, path)


INLINE_BYTES = 512 * 1024        # fs.write content in the CALL body up to this size
ATTACHMENT_BYTES = 32 << 20      # beyond it, attachments of this size (at most 64 of them)


class SandboxError(RuntimeError):
    """A sandbox could not be created, or a step of its setup or a CLI command failed."""


class BudgetExceeded(SandboxError):
    """A budget (docs/budget.md) cannot hold what was asked: nothing was started. The message names the
    budget, its ceiling, what is reserved or settled, the reservation asked and what remains."""


@dataclass
class ExecResult:
    """A command's output: stdout and stderr as text, and its exit status
    (returncode: the exit code, or -N for signal N, as subprocess does)."""

    stdout: str
    stderr: str
    returncode: int
    timed_out: bool = False

    def __str__(self):
        return self.stdout


@dataclass
class Snapshot:
    """A snapshot made by Sandbox.snapshot (the CLI's `gpubox snapshot`): its name and record."""

    name: str
    description: str = ""
    record: dict = field(default_factory=dict)


def write_bytes(client: Client, path: str, data: bytes, mode: int = 0o644, parents: bool = True) -> None:
    """fs.write of data to the sandbox path `path` (absolute), checked by size and sha256: in the call's body up to
    INLINE_BYTES, else as attachments (ValueError past the 64 one call carries)."""
    params = {"path": path, "mode": mode, "parents": parents, "size": len(data),
              "sha256": hashlib.sha256(data).hexdigest()}
    if len(data) <= INLINE_BYTES:
        client.call("fs.write", params=dict(params, data=data))
        return
    chunks = [data[at:at + ATTACHMENT_BYTES] for at in range(0, len(data), ATTACHMENT_BYTES)]
    if len(chunks) > 64:
        raise ValueError("write_file: %d bytes is more than one call carries; use upload()" % len(data))
    client.call("fs.write", params=params, attachments=chunks)


def read_bytes(client: Client, path: str, **params) -> bytes:
    """fs.read of the sandbox path `path` (absolute; params: offset, length), its streamed chunks joined;
    SandboxError when the content does not match the agent's sha256."""
    out = client.call("fs.read", path=path, **params)
    if "data" in out:
        data = bytes(out["data"])
    else:
        parts = sorted((item["offset"], b"".join(item.get("attachments", []))) for item in out.get("outputs", []))
        data = b"".join(part for _, part in parts)
    if hashlib.sha256(data).hexdigest() != out["sha256"]:
        raise SandboxError("read_file %s: the content does not match its sha256" % path)
    return data


def run_cli(*args: str, timeout: float = 600, stdin: Optional[str] = None, own_session: bool = False) -> dict:
    """Runs `gpubox --json ARGS` (stdin: text fed to it); its JSON answer, or SandboxError with the CLI's message.
    own_session: in a session of its own, out of reach of a Ctrl-C at this process's terminal."""
    done = subprocess.run([find_cli(), "--json", *args], capture_output=True, text=True, timeout=timeout,
                          input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL,
                          start_new_session=own_session)
    answers = []
    for line in done.stdout.strip().splitlines():
        try:
            answers.append(json.loads(line))
        except ValueError:
            pass
    answer = answers[-1] if answers else {}
    if done.returncode != 0:
        # A command over several ids (terminate) may print the error of one and then its result.
        errors = [a["error"] for a in answers if isinstance(a, dict) and isinstance(a.get("error"), dict)]
        error = errors[0] if errors else {}
        message = error.get("message") or done.stderr.strip() or "exit code %d" % done.returncode
        kind = BudgetExceeded if error.get("code") == "budget_exceeded" else SandboxError
        raise kind("gpubox %s: %s" % (args[0], message))
    return answer


def _slug(text: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.")[:40]
    return slug if slug and slug[0].isalnum() else "snapshot" + ("-" + slug if slug else "")


class Sandbox:
    """A gpubox sandbox made from a SandboxConfig; start() creates it, terminate() ends it."""

    def __init__(self, config: Optional[SandboxConfig] = None):
        self.config = config if config is not None else SandboxConfig()
        self._id: Optional[str] = None
        self._name: Optional[str] = None
        self._client: Optional[Client] = None
        self._handles: List[_plan.ModelHandle] = []
        self._closers = []    # sessions' cleanups (attach relays), run at terminate

    # ---------------------------------------------------------------- lifecycle

    def start(self, name: Optional[str] = None) -> "Sandbox":
        """Creates the sandbox, copies files in, installs packages, clones repos; returns self.
        ValueError (nothing created) for a bad config; BudgetExceeded (nothing started) when its budget cannot
        hold it; SandboxError when a step fails (the sandbox is ended)."""
        if self._id:
            raise SandboxError("sandbox %s is already started" % self._id)
        created = self._create(name)
        self._id, self._name = created["id"], created.get("name") or None
        try:
            self._adopt(self._id, self._name)
            self._provision()
        except BaseException:
            self.terminate()
            raise
        return self

    def _create(self, name: Optional[str]) -> dict:
        plan = _plan.plan_create(self.config, name)
        self._handles = plan.handles
        # The agent config (hidden models' names among it) through a pipe: in no file, in no argv.
        # Like `gpubox create`, this waits until each hosted model's load began, and fails naming one that failed.
        try:
            return run_cli("create", "--config", "/dev/stdin", *plan.create_args, stdin=json.dumps(plan.agent_config))
        except SandboxError as error:
            raise type(error)(_in_config_words(str(error))) from None

    def _adopt(self, sandbox_id: str, name: Optional[str]):
        self._id, self._name = sandbox_id, name
        self._client = _connect(sandbox_id)

    def _provision(self):
        config = self.config
        for local, remote in config.local_files + config.local_dirs:
            self.upload(local, remote)
        if config.system_packages:
            self._step("system_packages", _plan.apt_command(config.system_packages))
        uploads, specs = _plan.package_uploads(config)
        for local, remote in uploads:
            self.upload(local, remote)
        if specs:
            self._step("python_packages", _plan.pip_command(config, specs))
        for index, repo in enumerate(config.repos):
            self._step("repos[%d] (%s)" % (index, repo.url), _plan.clone_command(config, index))
            if repo.install:
                self._step("repos[%d] (%s) install" % (index, repo.url),
                           _plan.pip_command(config, [repo.sandbox_dest], editable=True))

    def _step(self, what: str, argv: List[str]):
        done = self.exec(argv, env=_plan.PIP_ENV)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip()[-2000:]
            raise SandboxError("SandboxConfig.%s: `%s` failed with exit code %d:\n%s"
                               % (what, " ".join(argv), done.returncode, tail))

    @classmethod
    def connect(cls, id_or_name: str) -> "Sandbox":
        """A Sandbox object for a running sandbox (made here or by `gpubox create`), by id, prefix or name."""
        record = _find(id_or_name)
        sandbox = cls(SandboxConfig(timeout=None, python=_kernel_config(record).get("python", "python3")))
        sandbox._handles = _handles_of(record)
        sandbox._adopt(record["id"], record.get("name") or None)
        return sandbox

    @classmethod
    def from_snapshot(cls, snapshot: Union[Snapshot, str], config: Optional[SandboxConfig] = None,
                      name: Optional[str] = None) -> "Sandbox":
        """A new sandbox from a snapshot: its files, installed packages and settings (not its processes).
        A config given overrides cpu, memory, timeout, idle_timeout, gpu and secrets; its packages,
        repos and files are not installed again (the snapshot has them)."""
        snapshot_name = snapshot.name if isinstance(snapshot, Snapshot) else snapshot
        args = ["create", "--from-snapshot", snapshot_name]
        if name:
            args += ["--name", name]
        if config is not None:
            config.check_local()
            full = _plan.plan_create(SandboxConfig(**{**config.__dict__, "models": [], "model_host": None, "repos": [],
                                                      "python_packages": [], "volumes": {}}))
            keep = {"--cpu", "--memory", "--timeout", "--idle-timeout", "--gpu", "--secret"}
            for flag, value in zip(full.create_args[::2], full.create_args[1::2]):
                if flag in keep:
                    args += [flag, value]
        created = run_cli(*args)
        record = _find(created["id"])
        sandbox = cls(config if config is not None else SandboxConfig(
            timeout=None, python=_kernel_config(record).get("python", "python3")))
        sandbox._handles = _handles_of(record)
        try:
            sandbox._adopt(created["id"], created.get("name") or None)
        except BaseException:
            run_cli("terminate", created["id"])
            raise
        return sandbox

    def snapshot(self, description: str = "", name: Optional[str] = None) -> Snapshot:
        """A snapshot of the sandbox's files and settings (not its processes), named from description."""
        self._require()
        name = name or "%s-%s" % (_slug(description or self._name or self._id), _random.token_hex(3))
        record = run_cli("snapshot", self._id, "--name", name)
        return Snapshot(record.get("name", name), description, record)

    def terminate(self, save_snapshot: bool = False, snapshot_description: str = "") -> Optional[Snapshot]:
        """Ends the sandbox (its state is removed); with save_snapshot, snapshots it first and returns that."""
        if not self._id:
            return None
        snapshot = self.snapshot(snapshot_description) if save_snapshot else None
        for close in reversed(self._closers):
            close()
        self._closers.clear()
        if self._client is not None:
            self._client.close()
            self._client = None
        sandbox_id, self._id = self._id, None
        run_cli("terminate", sandbox_id)
        return snapshot

    def __enter__(self) -> "Sandbox":
        return self if self._id else self.start()

    def __exit__(self, *exc):
        self.terminate()

    # ---------------------------------------------------------------- properties

    @property
    def sandbox_id(self) -> Optional[str]:
        return self._id

    @property
    def name(self) -> Optional[str]:
        return self._name

    @property
    def model_handles(self) -> List[_plan.ModelHandle]:
        return list(self._handles)

    @property
    def client(self) -> Client:
        """The RPC client connected to the sandbox's agent (rpc/PROTOCOL.md)."""
        return self._require()

    def _require(self) -> Client:
        if not self._id or self._client is None:
            raise SandboxError("the sandbox is not started (call start()) or was terminated")
        return self._client

    # ---------------------------------------------------------------- commands and files

    def exec(self, cmd: Union[str, Sequence[str]], timeout: Optional[float] = None, env: Optional[dict] = None,
             cwd: Optional[str] = None, stdin: Union[str, bytes] = b"") -> ExecResult:
        """Runs a command (a str through sh -c, a list as argv) to completion; killed after timeout s."""
        params = {"shell": cmd} if isinstance(cmd, str) else {"argv": list(cmd)}
        if timeout is not None:
            params["timeout_s"] = float(timeout)
        if env:
            params["env"] = dict(env)
        if cwd:
            params["cwd"] = cwd
        if stdin:
            params["stdin"] = stdin.encode() if isinstance(stdin, str) else bytes(stdin)
        out = self._require().call("proc.exec", params=params)
        code = out["exit_code"] if out.get("exit_code") is not None else -(out.get("signal") or 0)
        return ExecResult(out["stdout"].decode(errors="replace"), out["stderr"].decode(errors="replace"), code,
                          bool(out.get("timed_out")))

    def exec_python(self, code: str, timeout: Optional[float] = None) -> ExecResult:
        """Runs Python code in a fresh process of the sandbox's Python (not the notebook kernel)."""
        return self.exec([self.config.python, "-c", code], timeout=timeout)

    def write_file(self, path: str, content: Union[str, bytes], mode: int = 0o644) -> None:
        """Writes a file (atomically; parent directories created). A relative path is under /workspace."""
        data = content.encode() if isinstance(content, str) else bytes(content)
        write_bytes(self._require(), sandbox_path(path), data, mode)

    def read_file(self, path: str, binary: bool = False) -> Union[str, bytes]:
        """A file's content: text (UTF-8), or bytes with binary=True. A relative path is under /workspace."""
        data = read_bytes(self._require(), sandbox_path(path))
        return data if binary else data.decode()

    def ensure_dir(self, path: str) -> None:
        """Creates a directory and its missing parents (an existing one is fine). A relative path is under /workspace."""
        self._require().call("fs.mkdir", path=sandbox_path(path), parents=True)

    def upload(self, local: str, remote: str) -> None:
        """Copies a local file or directory to the sandbox path `remote` (a directory's contents
        into `remote` when that directory exists), with `gpubox put`."""
        self._require()
        if os.path.isdir(local) and self._is_dir(remote):
            for entry in sorted(os.listdir(local)):
                run_cli("put", self._id, os.path.join(local, entry), remote)
            return
        run_cli("put", self._id, local, remote, "--parents")

    def download(self, remote: str, local: str) -> None:
        """Copies a sandbox file or directory to `local`, with `gpubox get`."""
        self._require()
        run_cli("get", self._id, remote, local)

    def _is_dir(self, path: str) -> bool:
        try:
            return self._require().call("fs.stat", path=sandbox_path(path))["type"] == "dir"
        except Exception:
            return False

    def usage(self) -> dict:
        """What the sandbox used so far and what it was created with, as `gpubox usage ID --json`:
        {"id", "backend", "state", "since_create_s", "requested": {...}, "usage": sys.usage's result}
        (requested: cpu, memory_mib, timeout_s; on Modal also gpu {type, count} and region)."""
        self._require()
        return run_cli("usage", self._id)

    def model(self, name: str):
        """The model host's model `name` (SandboxConfig.model_host, or one loaded since): the same
        gpubox.Model as gpubox.connect(ID).model(name), on this sandbox's client."""
        return self._require().model(name)

    def wait_kernel(self, timeout: float = 600) -> None:
        """Waits until the kernel has run its setup (models loaded): a hidden no-op cell waits for it."""
        self._require().call("kernel.execute", code="None", hidden=True, timeout=timeout)

    def _on_terminate(self, close) -> None:
        self._closers.append(close)


# The CLI's flags in a create's refusal, as SandboxConfig names them.
_CONFIG_WORDS = (("; the sandbox was ended (--models-optional keeps it)", "; the sandbox was ended"),
                 ("must be mounted: --mount HOST:SANDBOX[:ro]", "must be in SandboxConfig.volumes"),
                 ("--timeout", "SandboxConfig.timeout"), ("--budget", "SandboxConfig.budget"),
                 ("--gpu", "SandboxConfig.gpu"), ("--memory", "SandboxConfig.memory"), ("--cpu", "SandboxConfig.cpu"))


def _in_config_words(message: str) -> str:
    for flag, field_name in _CONFIG_WORDS:
        message = message.replace(flag, field_name)
    return message


def _kernel_config(record: dict) -> dict:
    return record.get("spec", {}).get("agent_config", {}).get("kernel", {}) or {}


def _handles_of(record: dict) -> List[_plan.ModelHandle]:
    """The model handles of a sandbox the CLI recorded: its kernel.models and their mounts' sources."""
    sources = {m.get("target"): m.get("source", "") for m in record.get("spec", {}).get("mounts", [])}
    return [_plan.ModelHandle(m.get("name", ""), m.get("var_name", "model"), m.get("tokenizer_var", ""),
                              m.get("path", ""), sources.get(m.get("path"), ""), bool(m.get("hidden")),
                              bool(m.get("is_peft")), m.get("base_model"))
            for m in _kernel_config(record).get("models", [])]
