"""The fake's sandboxes: each is a real podman container of the image the
SDK described, run as Modal runs a sandbox: the image's ENTRYPOINT (as the
image's Dockerfile commands left it) with the sandbox's arguments appended,
its env and secrets as environment variables (passed to podman through its
own environment, so no value is in podman's argv), files the SDK added with
add_local_file bind-mounted read-only at their paths, volumes as host
directories, and the first unencrypted port published on 127.0.0.1 as the
tunnel. One asyncio loop."""

import asyncio
import json
import os
import shlex
import tempfile



async def podman(*args, env=None, timeout=120):
    """(exit status, stdout, stderr) of `podman ARGS`."""
    process = await asyncio.create_subprocess_exec(
        "podman", *args, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env=env)
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout)
    except asyncio.TimeoutError:
        process.kill()
        out, err = await process.communicate()
    return process.returncode, out.decode(errors="replace"), err.decode(errors="replace")


class FakeSandbox:
    """One sandbox: its definition, its container and how it ended."""

    def __init__(self, sandbox_id, app_id, definition, tags):
        self.id = sandbox_id
        self.app_id = app_id
        self.definition = definition
        self.tags = dict(tags)
        self.container = "fake-modal-" + sandbox_id
        self.started = asyncio.Event()
        self.start_error = ""
        self.ended = None  # (status, exit code, message) once it ended
        self.terminated = False
        self.tunnel = None  # (host, port)

    async def start(self, run_args, env, make_dirs):
        status, out, err = await podman(*run_args, env=env)
        empty = tempfile.mkdtemp(prefix="fake-modal-dir-")
        os.chmod(empty, 0o755)
        for path in make_dirs if status == 0 else []:  # a WORKDIR the base lacks: the build would have made it
            status, _, err = await podman("cp", empty, "%s:%s" % (self.container, path))
        os.rmdir(empty)
        if status == 0:
            status, out, err = await podman("start", self.container)
        if status != 0:
            self.start_error = err.strip().splitlines()[-1] if err.strip() else "podman run failed"
            self.ended = ("failure", 1, self.start_error)
        else:
            ports = [p.port for p in self.definition.open_ports.ports if p.unencrypted]
            if ports:
                status, out, err = await podman("port", self.container, "%d/tcp" % ports[0])
                line = out.strip().splitlines()[0] if out.strip() else ""
                if ":" in line:
                    host, port = line.rsplit(":", 1)
                    self.tunnel = ("127.0.0.1" if host in ("0.0.0.0", "") else host, int(port))
        self.started.set()

    async def refresh(self):
        """Notes the container's exit, once it has one."""
        if self.ended or not self.started.is_set():
            return
        status, out, _ = await podman("inspect", "--format", "{{.State.Status}} {{.State.ExitCode}} {{.State.OOMKilled}}",
                                      self.container)
        parts = out.split()
        if status != 0:
            self.ended = ("terminated" if self.terminated else "failure", 1, "the container is gone")
        elif parts and parts[0] in ("exited", "stopped"):
            code = int(parts[1])
            if self.terminated:
                self.ended = ("terminated", code, "Sandbox terminated")
            elif len(parts) > 2 and parts[2] == "true":
                self.ended = ("failure", code, "Sandbox ran out of memory (OOM)")
            else:
                self.ended = ("success" if code == 0 else "failure", code, "")

    async def terminate(self):
        self.terminated = True
        await self.started.wait()
        await podman("stop", "--time", "10", self.container, timeout=60)
        await self.refresh()

    async def commit(self, tag):
        """The container's file system as an image (bind mounts and volumes excluded, as Modal's snapshot excludes Volumes)."""
        status, _, err = await podman("commit", "--quiet", self.container, tag, timeout=300)
        return err.strip() if status != 0 else ""

    async def remove(self):
        await podman("rm", "--force", "--volumes", "--time", "0", self.container, timeout=60)


def run_arguments(sandbox, image_layers, mount_files, volume_dirs, secret_names):
    """`podman create` arguments for a sandbox (no secret value in them: env names only), and the
    directories to make in it before it starts."""
    d = sandbox.definition
    base = None
    entrypoint = None
    binds = []
    make_dirs = []
    for layer in image_layers:
        for command in layer["commands"]:
            word, _, rest = command.partition(" ")
            if word == "FROM" and layer.get("registry"):
                base = rest.strip()
            elif word == "ENTRYPOINT":
                entrypoint = json.loads(rest)
            elif word == "WORKDIR":
                binds += ["--workdir", rest.strip()]
                make_dirs.append(rest.strip())
            elif word == "ENV":
                name, _, value = rest.partition("=")
                binds += ["--env", "%s=%s" % (name, shlex.split(value)[0] if value else "")]
            elif word == "COPY" and layer.get("context_mount_id"):
                for remote, local in mount_files.get(layer["context_mount_id"], []):
                    binds += ["--volume", "%s:%s:ro" % (local, remote)]
    args = ["create", "--name", sandbox.container, "--label", "fake-modal.sandbox=" + sandbox.id,
            "--hostname", sandbox.id]
    ports = [p.port for p in d.open_ports.ports if p.unencrypted]
    for port in ports:
        args += ["--publish", "127.0.0.1::%d" % port]
    if d.resources.milli_cpu:
        args.append("--cpus=%g" % (d.resources.milli_cpu / 1000))
    if d.resources.memory_mb_max or d.resources.memory_mb:
        args.append("--memory=%dm" % (d.resources.memory_mb_max or d.resources.memory_mb))
    for name in secret_names:
        args += ["--env", name]
    for mount in d.volume_mounts:
        args += ["--volume", "%s:%s" % (volume_dirs[mount.volume_id], mount.mount_path)]
    args += binds
    command = list(entrypoint or []) + list(d.entrypoint_args)
    if entrypoint is not None:
        args += ["--entrypoint", json.dumps(command[:1])]
        command = command[1:]
    args.append(base)
    return args + command, make_dirs
