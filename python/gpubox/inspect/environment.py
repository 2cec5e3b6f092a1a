"""GpuboxSandboxEnvironment: Inspect's sandbox interface (`--sandbox gpubox`) on
gpubox sandboxes. A sample's sandboxes are made and ended with the `gpubox`
CLI; everything in between (exec, files) goes over the sandbox's one RPC
connection, shared by the sample's concurrent calls, each on a worker thread:
no process starts per call."""

import json
import os
import re
import secrets
from typing import Dict, List, Optional, Union

import anyio
from inspect_ai.util import (
    ExecResult,
    OutputLimitExceededError,
    SandboxConnection,
    SandboxEnvironment,
    SandboxEnvironmentLimits,
    concurrency as inspect_concurrency,
    sandboxenv,
)
from inspect_ai.util._sandbox.environment import SandboxUnavailableError
from inspect_ai.util._sandbox.lifecycle import sandbox_lifecycle_state

from ..client import Client, RpcError
from ..sandboxes import connect, find
from . import files, process
from ._cli import ended_message, run_cli
from ._live import live, terminate
from .config import GpuboxSandboxConfig

# A call that runs longer than this has the agent pinged, with this deadline, every WATCH_S.
WATCH_S = 2.0
WATCH_PING_S = 3.0
# Names of the sandboxes this provider makes: `inspect sandbox cleanup gpubox` ends every one of them.
NAME_PREFIX = "inspect-"


@sandboxenv(name="gpubox")
class GpuboxSandboxEnvironment(SandboxEnvironment):
    """One gpubox sandbox of a sample; exec, read_file and write_file with Inspect's semantics."""

    def __init__(self, sandbox_id: str, name: str, config: GpuboxSandboxConfig, client: Client):
        super().__init__()
        self.sandbox_id = sandbox_id
        self.name = name
        self.config = config
        self.client = client
        # What exec gives its commands as GPUBOX_ENDPOINT, so that gpubox.Client() there reaches this
        # sandbox's agent and its model host (as in the agent's kernel).
        self.endpoint = process.inner_endpoint(client, sandbox_id)

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    def config_deserialize(cls, config: dict) -> GpuboxSandboxConfig:
        return GpuboxSandboxConfig(**config)

    @classmethod
    def default_concurrency(cls) -> Optional[int]:
        return None

    def default_polling_interval(self) -> float:
        """How often exec_remote's streaming polls Inspect's sandbox tools: each poll is one RPC call."""
        return 0.5

    @classmethod
    async def task_init(cls, task_name: str, config) -> None:
        """Checks what the config needs before any sample starts: the CLI, and a container image
        (pulled once when the engine does not have it)."""
        settings = GpuboxSandboxConfig.of(config)
        await anyio.to_thread.run_sync(process.check_prerequisites, settings)

    @classmethod
    async def sample_init(cls, task_name: str, config, metadata: Dict[str, str]) -> Dict[str, SandboxEnvironment]:
        """The sample's sandboxes, made together: "default" (config), then config.environments' names.
        One that cannot be made fails the sample with gpubox's message, and ends the others."""
        settings = GpuboxSandboxConfig.of(config)
        wanted = [("default", settings)] + list(settings.environments.items())
        made: Dict[str, GpuboxSandboxEnvironment] = {}
        failures: List[BaseException] = []
        scope = sandbox_lifecycle_state()  # None: the provider driven directly, outside an eval batch

        def create(env_name: str, env_config: GpuboxSandboxConfig):
            made[env_name] = cls._create(task_name, env_name, env_config, scope)  # kept even if the sample is cancelled

        async def make(env_name: str, env_config: GpuboxSandboxConfig):
            try:
                await anyio.to_thread.run_sync(create, env_name, env_config)
            except Exception as error:
                failures.append(error)

        try:
            async with anyio.create_task_group() as group:
                for env_name, env_config in wanted:
                    group.start_soon(make, env_name, env_config)
        except BaseException:
            # Cancelled (Ctrl-C): task_cleanup ends the sandboxes; their clients are closed here, never left to
            # the garbage collector, whose zmq Context.__del__ can block in term() for good (a socket in its cycle).
            for environment in made.values():
                environment.client.close()
            raise
        if failures:
            for environment in made.values():
                environment.client.close()
            await anyio.to_thread.run_sync(terminate, [e.sandbox_id for e in made.values()])
            raise failures[0]
        return {env_name: made[env_name] for env_name, _ in wanted}

    @classmethod
    def _create(cls, task_name: str, env_name: str, config: GpuboxSandboxConfig,
                scope: object) -> "GpuboxSandboxEnvironment":
        name = "%s%s-%s" % (NAME_PREFIX, _slug("%s-%s" % (task_name, env_name)), secrets.token_hex(4))
        args = ["create", *config.create_args(), "--name", name]
        agent_config = config.agent_config()
        stdin = None
        if agent_config is not None:
            args += ["--config", "/dev/stdin"]
            stdin = json.dumps(agent_config)
        live.begin_create()
        sandbox_id = None
        try:
            sandbox_id = run_cli(*args, stdin=stdin)["id"]
        finally:
            live.end_create(sandbox_id, scope)
        client = None
        try:
            client = connect(sandbox_id)
            return cls(sandbox_id, name, config, client)
        except BaseException:
            if client is not None:
                client.close()
            terminate([sandbox_id])
            raise

    @classmethod
    async def sample_cleanup(cls, task_name: str, config, environments: Dict[str, SandboxEnvironment],
                             interrupted: bool) -> None:
        """Harvests job outputs (config.harvest, unless interrupted), then ends the sample's sandboxes."""
        sandboxes = [env.as_type(GpuboxSandboxEnvironment) for env in environments.values()]
        for sandbox in sandboxes:
            sandbox.client.close()
        settings = GpuboxSandboxConfig.of(config)
        try:
            if settings.harvest and not interrupted:
                for sandbox in sandboxes:
                    await anyio.to_thread.run_sync(process.harvest_jobs, sandbox.sandbox_id,
                                                   os.path.join(settings.harvest, sandbox.sandbox_id))
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(terminate, [s.sandbox_id for s in sandboxes])

    @classmethod
    async def task_cleanup(cls, task_name: str, config, cleanup: bool) -> None:
        """Ends what the eval batch's samples left (a create that finished after its sample was cancelled);
        with --no-sandbox-cleanup, keeps it and says how to end it, as Inspect's docker provider does."""
        scope = sandbox_lifecycle_state()
        with anyio.CancelScope(shield=True):
            left = await anyio.to_thread.run_sync(live.settle, scope)
            if cleanup:
                await anyio.to_thread.run_sync(terminate, left)
                return
            live.forget(left)  # not this process's to end at its exit either
        if left:
            print("\ngpubox sandboxes not cleaned up: %s\nend them with `inspect sandbox cleanup gpubox` "
                  "(or `gpubox terminate ID`)" % " ".join(left))

    @classmethod
    async def cli_cleanup(cls, id: Optional[str]) -> None:
        """`inspect sandbox cleanup gpubox [ID]`: ends that sandbox, or every one this provider made.
        An ID that names no sandbox raises SandboxError ("no sandbox with id or name 'ID'")."""
        if id:
            await anyio.to_thread.run_sync(lambda: run_cli("terminate", id))
            return
        listed = await anyio.to_thread.run_sync(lambda: run_cli("ls"))
        ids = [s["id"] for s in listed if (s.get("name") or "").startswith(NAME_PREFIX)]
        await anyio.to_thread.run_sync(terminate, ids)

    # ------------------------------------------------------------------ commands and files

    async def exec(self, cmd: List[str], input: Union[str, bytes, None] = None, cwd: Optional[str] = None,
                   env: Optional[Dict[str, str]] = None, user: Optional[str] = None, timeout: Optional[int] = None,
                   timeout_retry: bool = True, concurrency: bool = True) -> ExecResult[str]:
        """Runs cmd to its end: in cwd (relative: under /workspace), as user (runuser), killed with its
        process group after timeout s (TimeoutError). Output past Inspect's limit raises
        OutputLimitExceededError; a program that is not there is a failed result (127). GPUBOX_ENDPOINT
        is the agent's in-sandbox socket (gpubox.Client() reaches it), unless env says otherwise."""
        if self.endpoint:
            env = {"GPUBOX_ENDPOINT": self.endpoint, **(env or {})}
        request = process.ExecRequest(cmd, input, files.sandbox_path(cwd) if cwd else files.WORKSPACE, env, user,
                                      timeout, SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE)
        if concurrency and self.config.backend != "modal":  # it runs on this machine: Inspect's subprocess limit
            from inspect_ai.util._subprocess import max_subprocesses_context_var
            async with inspect_concurrency("subprocesses", max_subprocesses_context_var.get(), resizable=True):
                outcome = await self._call(process.run, self.client, request)
        else:
            outcome = await self._call(process.run, self.client, request)
        if outcome.timed_out:
            raise TimeoutError("%s timed out after %s s" % (cmd[0] if cmd else "command", timeout))
        if outcome.truncated:
            raise OutputLimitExceededError(SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE_STR, outcome.stdout)
        return ExecResult(outcome.returncode == 0, outcome.returncode, outcome.stdout, outcome.stderr)

    async def write_file(self, file: str, contents: Union[str, bytes]) -> None:
        """Writes file (relative: under /workspace), parents created; IsADirectoryError, PermissionError."""
        await self._call(files.write, self.client, file, contents)

    async def read_file(self, file: str, text: bool = True) -> Union[str, bytes]:
        """file's content; FileNotFoundError, IsADirectoryError, PermissionError, OutputLimitExceededError past
        Inspect's read limit, UnicodeDecodeError for text that is not UTF-8."""
        data = await self._call(files.read, self.client, file, SandboxEnvironmentLimits.MAX_READ_FILE_SIZE,
                                SandboxEnvironmentLimits.MAX_READ_FILE_SIZE_STR)
        return data.decode("utf-8") if text else data

    async def connection(self, *, user: Optional[str] = None) -> SandboxConnection:
        """The command that opens a shell in the sandbox."""
        if ended_message(self.sandbox_id) is not None:
            raise ConnectionError("sandbox %s is not running" % self.sandbox_id)
        command = "gpubox exec -it %s bash" % self.sandbox_id
        if user:
            command = "gpubox exec -it %s -- runuser -u %s -- bash" % (self.sandbox_id, user)
        return SandboxConnection(type="gpubox", command=command, container=self.sandbox_id)

    async def _call(self, fn, *args):
        """fn(*args) on a worker thread, watched: while it runs, the agent is pinged every WATCH_S, and a
        sandbox that stopped answering because it ended raises SandboxUnavailableError saying how (a call
        to a dead agent would otherwise wait for an answer forever)."""
        box = {}
        async with anyio.create_task_group() as group:
            async def watch():
                while True:
                    await anyio.sleep(WATCH_S)
                    ended = await anyio.to_thread.run_sync(self._ended_if_unanswered)
                    if ended is not None:
                        box["ended"] = ended
                        group.cancel_scope.cancel()
                        return

            group.start_soon(watch)
            try:
                box["value"] = await anyio.to_thread.run_sync(fn, *args, abandon_on_cancel=True)
            except Exception as error:
                box["error"] = error
            group.cancel_scope.cancel()
        error = box.get("error")
        if isinstance(error, RpcError) and error.code in ("unavailable", "cancelled", "internal"):
            box["ended"] = await anyio.to_thread.run_sync(ended_message, self.sandbox_id)
        if box.get("ended") is not None:
            raise SandboxUnavailableError("gpubox sandbox %s has ended (%s)" % (self.sandbox_id, box["ended"]))
        if error is not None:
            raise error
        return box["value"]

    def _ended_if_unanswered(self) -> Optional[str]:
        """None while the agent runs (its record says so, at once, for a host process or container) and
        answers a ping, or has not ended; else how the sandbox ended."""
        try:
            if find(self.sandbox_id)["state"] == "dead":
                return ended_message(self.sandbox_id)
            self.client.call("sys.ping", timeout=WATCH_PING_S)
            return None
        except (RpcError, LookupError):
            return ended_message(self.sandbox_id)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.")[:40] or "task"
