"""The fake's sandboxes as host processes, for tests that need no container
engine (--process-sandboxes): a sandbox is the static agent its image added
(the file the SDK put at /usr/local/bin/gpubox-agent) run as a child of the
fake, in subreaper mode, in a directory of its own. Its config (the
GPUBOX_CONFIG secret) is the one gpubox sent with two changes a container
would make unnecessary: the agent listens on a free port of 127.0.0.1 (the
tunnel) and keeps its state under the sandbox's directory. Modal's container
timeout ends it as Modal would. Same interface as sandboxes.FakeSandbox. One asyncio loop."""

import asyncio
import base64
import json
import os
import shutil
import signal
import socket
import tempfile

AGENT_IN_IMAGE = "/usr/local/bin/gpubox-agent"


def agent_of(image_layers, mount_files):
    """The local file the image's layers put at the agent's path, or None."""
    found = None
    for layer in image_layers:
        for command in layer["commands"]:
            if command.startswith("COPY") and layer.get("context_mount_id"):
                for remote, local in mount_files.get(layer["context_mount_id"], []):
                    if remote == AGENT_IN_IMAGE:
                        found = local
    return found


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ProcessSandbox:
    """One sandbox: its definition, its agent process and how it ended."""

    def __init__(self, sandbox_id, app_id, definition, tags):
        self.id = sandbox_id
        self.app_id = app_id
        self.definition = definition
        self.tags = dict(tags)
        self.container = "fake-modal-process-" + sandbox_id
        self.started = asyncio.Event()
        self.start_error = ""
        self.ended = None
        self.terminated = False
        self.tunnel = None
        self.process = None
        self.dir = tempfile.mkdtemp(prefix="fake-modal-sandbox-")
        self.timer = None

    async def start(self, agent, env):
        try:
            port = free_port()
            config = json.loads(base64.b64decode(env.get("GPUBOX_CONFIG", "")) or b"{}")
            config.setdefault("rpc", {})["endpoints"] = ["tcp://127.0.0.1:%d" % port]
            config["state_dir"] = os.path.join(self.dir, "state")
            os.makedirs(config["state_dir"], mode=0o700)
            env = dict(env, GPUBOX_CONFIG=base64.b64encode(json.dumps(config).encode()).decode(), HOME=self.dir)
            if not agent:
                raise RuntimeError("the image adds no agent at " + AGENT_IN_IMAGE)
            self.process = await asyncio.create_subprocess_exec(
                agent, cwd=self.dir, env=env, stdin=asyncio.subprocess.DEVNULL,
                stdout=open(os.path.join(self.dir, "agent.out"), "wb"), stderr=asyncio.subprocess.STDOUT,
                start_new_session=True)
            self.tunnel = ("127.0.0.1", port)
            timeout = self.definition.timeout_secs or 300
            self.timer = asyncio.get_running_loop().call_later(timeout, self._time_out)
        except Exception as e:  # noqa: BLE001 - reported as Modal reports a sandbox that failed to start
            self.start_error = str(e)
            self.ended = ("failure", 1, self.start_error)
        self.started.set()

    def _time_out(self):
        if self.process and self.process.returncode is None:
            self.ended = ("timeout", 124, "Sandbox timed out")
            os.killpg(self.process.pid, signal.SIGKILL)

    async def refresh(self):
        if self.ended or not self.started.is_set() or self.process is None:
            return
        if self.process.returncode is not None:
            code = self.process.returncode
            status = "terminated" if self.terminated else "success" if code == 0 else "failure"
            self.ended = (status, code, "Sandbox terminated" if self.terminated else "")

    async def terminate(self):
        self.terminated = True
        await self.started.wait()
        if self.process and self.process.returncode is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(self.process.wait(), 10)
            except asyncio.TimeoutError:
                os.killpg(self.process.pid, signal.SIGKILL)
                await self.process.wait()
        await self.refresh()

    async def commit(self, tag):
        return "process sandboxes take no snapshot"

    async def remove(self):
        if self.timer:
            self.timer.cancel()
        if self.process and self.process.returncode is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            await self.process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
