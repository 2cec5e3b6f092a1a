"""The ModalClient methods the gpubox backend's SDK calls, answered the way
Modal answers them (found by running the SDK against this server and reading
its source). Every other method answers UNIMPLEMENTED and is logged, so a new
SDK call shows up as a clear test failure. One asyncio loop."""

import asyncio
import base64
import json
import hashlib
import os
import shutil
import tempfile
import time
import uuid

from google.protobuf import empty_pb2
from grpclib import GRPCError, Status
from modal_proto import api_grpc, api_pb2

from .unimplemented import answer_unimplemented

from .process_sandboxes import ProcessSandbox, agent_of
from .sandboxes import FakeSandbox, podman, run_arguments


def summary(definition, tags, secret_envs):
    """What a test checks of a sandbox's definition: each gpubox flag's SDK parameter, and secret *names* only."""
    d = definition
    return {
        "entrypoint_args": list(d.entrypoint_args), "timeout_secs": d.timeout_secs,
        "gpu": {"type": d.resources.gpu_config.gpu_type, "count": d.resources.gpu_config.count},
        "milli_cpu": d.resources.milli_cpu, "memory_mb": d.resources.memory_mb,
        "regions": list(d.scheduler_placement.regions),
        "network": {"type": d.network_access.network_access_type, "cidrs": list(d.network_access.allowed_cidrs)},
        "block_network": d.block_network,
        "volumes": {m.mount_path: m.volume_id for m in d.volume_mounts},
        "ports": [{"port": p.port, "unencrypted": p.unencrypted} for p in d.open_ports.ports],
        "tags": tags, "secret_names": sorted({name for env in secret_envs for name in env}),
        "name": d.name, "idle_timeout_secs": d.idle_timeout_secs}


def unsigned_jwt():
    """An unsigned JWT: the SDK reads only its expiry."""
    def part(value):
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")
    return "%s.%s.fake" % (part({"alg": "none"}), part({"exp": int(time.time()) + 3600}))


def _new_id(prefix):
    return "%s-%s" % (prefix, uuid.uuid4().hex[:20])


class _Base(api_grpc.ModalClientBase):
    """Every abstract method of the service, answering UNIMPLEMENTED."""


answer_unimplemented(_Base, "Modal control plane", lambda modal: modal._log)


class FakeModal(_Base):
    """The fake control plane's state: apps, images, mounts, secrets, volumes, sandboxes."""

    def __init__(self, blobs, calls_path=None, volumes_dir=None, named_secrets=None, blackhole=None, open_network=None,
                 process_sandboxes=False):
        self.blobs = blobs
        self.calls_path = calls_path
        self.volumes_dir = volumes_dir
        self.files_dir = tempfile.mkdtemp(prefix="fake-modal-files-")
        self.files = {}        # sha256 -> local path of an uploaded file
        self.mounts = {}       # mount id -> [(path in the image, local path)]
        self.images = {}       # image id -> {"parent", "commands", "context_mount_id", "registry"}
        self.image_ids = {}    # serialized definition -> image id
        self.secrets = {}      # secret id -> {name: value}, in memory only
        self.named_secrets = {}  # name -> secret id
        for name, values in (named_secrets or {}).items():
            self.named_secrets[name] = _new_id("st")
            self.secrets[self.named_secrets[name]] = dict(values)
        self.volumes = {}      # volume id -> host directory
        self.sandboxes = {}    # sandbox id -> FakeSandbox
        self.tasks = []
        self.tunnels_blackhole = blackhole  # (host, port) every tunnel leads to, or None
        self.open_network = open_network  # podman's --network for sandboxes Modal lets out (None: podman's default)
        self.url = ""          # this server's, set once it listens
        self.jwt = "fake.jwt"  # set by __main__ to an unsigned token with an expiry
        self.committed = []    # images of snapshots, removed at close
        self.process_sandboxes = process_sandboxes  # sandboxes as host processes of the agent (no podman)

    def _log(self, line):
        # One line per call (and "definition JSON" per sandbox created), for the tests to read.
        if self.calls_path:
            with open(self.calls_path, "a") as f:
                f.write(line + "\n")

    async def close(self):
        """Removes every container the fake started, and the uploaded files."""
        for sandbox in self.sandboxes.values():
            await sandbox.started.wait()
            await sandbox.remove()
        for tag in self.committed if not self.process_sandboxes else []:
            await podman("rmi", "--force", tag)
        shutil.rmtree(self.files_dir, ignore_errors=True)

    async def ClientHello(self, stream):
        await stream.recv_message()
        self._log("ClientHello")
        await stream.send_message(api_pb2.ClientHelloResponse())

    async def AppGetOrCreate(self, stream):
        request = await stream.recv_message()
        self._log("AppGetOrCreate")
        await stream.send_message(api_pb2.AppGetOrCreateResponse(app_id="ap-" + request.app_name))

    # -- environments, apps, secrets, volumes --------------------------------

    async def EnvironmentGetOrCreate(self, stream):
        await stream.recv_message()
        self._log("EnvironmentGetOrCreate")
        settings = api_pb2.EnvironmentSettings(image_builder_version="2025.06")
        await stream.send_message(api_pb2.EnvironmentGetOrCreateResponse(
            environment_id="en-main", metadata=api_pb2.EnvironmentMetadata(name="main", settings=settings)))

    async def SecretGetOrCreate(self, stream):
        request = await stream.recv_message()
        self._log("SecretGetOrCreate")
        if request.deployment_name:
            if request.deployment_name not in self.named_secrets:
                raise GRPCError(Status.NOT_FOUND, "Secret '%s' not found in environment 'main'" % request.deployment_name)
            secret_id = self.named_secrets[request.deployment_name]
        else:
            secret_id = _new_id("st")
            self.secrets[secret_id] = dict(request.env_dict)  # in memory only
        await stream.send_message(api_pb2.SecretGetOrCreateResponse(secret_id=secret_id))

    async def VolumeGetOrCreate(self, stream):
        request = await stream.recv_message()
        self._log("VolumeGetOrCreate")
        name = request.deployment_name
        volume_id = "vo-" + name
        path = os.path.join(self.volumes_dir, name)
        os.makedirs(path, exist_ok=True)
        self.volumes[volume_id] = path
        await stream.send_message(api_pb2.VolumeGetOrCreateResponse(volume_id=volume_id))

    # -- images and the files added to them ---------------------------------

    async def BlobCreate(self, stream):
        await stream.recv_message()
        self._log("BlobCreate")
        blob_id = self.blobs.new_id()
        await stream.send_message(api_pb2.BlobCreateResponse(
            blob_ids=[blob_id], upload_urls=api_pb2.UploadUrlList(items=[self.blobs.url(blob_id)])))

    async def MountBatchedCheckExistence(self, stream):
        request = await stream.recv_message()
        self._log("MountBatchedCheckExistence")
        missing = [h for h in request.sha256_hex_hashes if h not in self.files]
        await stream.send_message(api_pb2.MountBatchedCheckExistenceResponse(missing_sha256_hex_hashes=missing))

    async def MountPutFile(self, stream):
        request = await stream.recv_message()
        self._log("MountPutFile")
        if request.sha256_hex in self.files:
            await stream.send_message(api_pb2.MountPutFileResponse(exists=True))
            return
        data = request.data if not request.data_blob_id else self.blobs.get(request.data_blob_id)
        if data is None and not request.data and not request.data_blob_id:
            await stream.send_message(api_pb2.MountPutFileResponse(exists=False))
            return
        if data is None or hashlib.sha256(data).hexdigest() != request.sha256_hex:
            raise GRPCError(Status.INVALID_ARGUMENT, "the file's content does not match its sha256")
        path = os.path.join(self.files_dir, request.sha256_hex)
        with open(path + ".tmp", "wb") as f:
            f.write(data)
        os.rename(path + ".tmp", path)
        self.files[request.sha256_hex] = path
        await stream.send_message(api_pb2.MountPutFileResponse(exists=True))

    async def MountGetOrCreate(self, stream):
        request = await stream.recv_message()
        self._log("MountGetOrCreate")
        entries = []
        for file in request.files:
            if file.sha256_hex not in self.files:
                raise GRPCError(Status.FAILED_PRECONDITION, "file %s was not uploaded" % file.filename)
            local = self.files[file.sha256_hex]
            os.chmod(local, file.mode & 0o777 if file.mode else 0o644)
            entries.append((file.filename, local))
        mount_id = _new_id("mo")
        self.mounts[mount_id] = entries
        await stream.send_message(api_pb2.MountGetOrCreateResponse(mount_id=mount_id))

    async def ImageGetOrCreate(self, stream):
        request = await stream.recv_message()
        self._log("ImageGetOrCreate")
        image = request.image
        key = image.SerializeToString(deterministic=True)
        if key not in self.image_ids:  # Modal builds an image definition once and reuses it
            parent = image.base_images[0].image_id if image.base_images else None
            self.image_ids[key] = _new_id("im")
            self.images[self.image_ids[key]] = {
                "parent": parent, "commands": list(image.dockerfile_commands),
                "context_mount_id": image.context_mount_id, "registry": not image.base_images}
            self._log("image %s %s" % (self.image_ids[key], list(image.dockerfile_commands)))
        result = api_pb2.GenericResult(status=api_pb2.GenericResult.GENERIC_STATUS_SUCCESS)
        await stream.send_message(api_pb2.ImageGetOrCreateResponse(
            image_id=self.image_ids[key], result=result, metadata=api_pb2.ImageMetadata(image_builder_version="2025.06")))

    async def ImageFromId(self, stream):
        request = await stream.recv_message()
        self._log("ImageFromId")
        if request.image_id not in self.images:
            raise GRPCError(Status.NOT_FOUND, "Image %s not found" % request.image_id)
        await stream.send_message(api_pb2.ImageFromIdResponse(image_id=request.image_id))

    def _layers(self, image_id):
        layers = []
        while image_id:
            layer = self.images[image_id]
            layers.insert(0, layer)
            image_id = layer["parent"]
        return layers

    # -- sandboxes -----------------------------------------------------------

    def _start(self, app_id, definition, tags, secret_envs):
        """Registers a sandbox and starts its container in the background."""
        if definition.image_id not in self.images:
            raise GRPCError(Status.NOT_FOUND, "Image %s not found" % definition.image_id)
        self._log("definition " + json.dumps(summary(definition, {t.tag_name: t.tag_value for t in tags}, secret_envs)))
        kind = ProcessSandbox if self.process_sandboxes else FakeSandbox
        sandbox = kind(_new_id("sb"), app_id, definition, {t.tag_name: t.tag_value for t in tags})
        self.sandboxes[sandbox.id] = sandbox
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "XDG_RUNTIME_DIR", "TMPDIR")}
        names = []
        for values in secret_envs:
            env.update(values)
            names += [n for n in values if n not in names]
        if self.process_sandboxes:
            self._log("process " + sandbox.id)
            self.tasks.append(asyncio.ensure_future(sandbox.start(agent_of(self._layers(definition.image_id), self.mounts), env)))
            return sandbox
        args, make_dirs = run_arguments(sandbox, self._layers(definition.image_id), self.mounts, self.volumes, names)
        open_type = definition.network_access.network_access_type in (0, api_pb2.NetworkAccess.NetworkAccessType.OPEN)
        if self.open_network and open_type and not definition.block_network:
            args.insert(1, "--network=" + self.open_network)
        self._log("podman " + " ".join(args))
        self.tasks.append(asyncio.ensure_future(sandbox.start(args, env, make_dirs)))
        return sandbox

    async def SandboxCreate(self, stream):
        request = await stream.recv_message()
        self._log("SandboxCreate")
        envs = [self.secrets.get(s, {}) for s in request.definition.secret_ids]
        sandbox = self._start(request.app_id, request.definition, request.tags, envs)
        await stream.send_message(api_pb2.SandboxCreateResponse(sandbox_id=sandbox.id))

    async def SandboxCreateV2(self, stream):
        request = await stream.recv_message()
        self._log("SandboxCreateV2")
        envs = [self.secrets.get(s, {}) for s in request.definition.secret_ids]
        for source in request.secret_sources:
            envs.append(self.secrets.get(source.secret_id, {}) if source.secret_id else dict(source.env.contents))
        sandbox = self._start(request.app_id, request.definition, request.tags, envs)
        await stream.send_message(api_pb2.SandboxCreateV2Response(sandbox_id=sandbox.id))

    def _sandbox(self, sandbox_id):
        if sandbox_id not in self.sandboxes:
            raise GRPCError(Status.NOT_FOUND, "Sandbox %s not found" % sandbox_id)
        return self.sandboxes[sandbox_id]

    async def SandboxGetTunnels(self, stream):
        request = await stream.recv_message()
        self._log("SandboxGetTunnels")
        sandbox = self._sandbox(request.sandbox_id)
        try:
            await asyncio.wait_for(sandbox.started.wait(), request.timeout or 50)
        except asyncio.TimeoutError:
            await stream.send_message(api_pb2.SandboxGetTunnelsResponse(
                result=api_pb2.GenericResult(status=api_pb2.GenericResult.GENERIC_STATUS_TIMEOUT)))
            return
        if self.tunnels_blackhole:  # a tunnel that accepts nothing: the tests' "never answers" case
            host, port = self.tunnels_blackhole
        elif sandbox.tunnel:
            host, port = sandbox.tunnel
        elif sandbox.ended:
            raise GRPCError(Status.FAILED_PRECONDITION, "Sandbox %s has already finished" % sandbox.id)
        else:
            raise GRPCError(Status.FAILED_PRECONDITION, "Sandbox %s has no tunnel: %s"
                            % (sandbox.id, sandbox.start_error or "it has no unencrypted port"))
        tunnels = [api_pb2.TunnelData(host=host, port=port, unencrypted_host=host, unencrypted_port=port,
                                      container_port=p.port) for p in sandbox.definition.open_ports.ports][:1]
        await stream.send_message(api_pb2.SandboxGetTunnelsResponse(
            result=api_pb2.GenericResult(status=api_pb2.GenericResult.GENERIC_STATUS_SUCCESS), tunnels=tunnels))

    def _result(self, sandbox):
        if not sandbox.ended:
            return api_pb2.GenericResult()
        status, code, message = sandbox.ended
        value = {"success": 1, "failure": 2, "terminated": 3, "timeout": 4}[status]
        return api_pb2.GenericResult(status=value, exitcode=code, exception=message)

    async def SandboxWait(self, stream):
        request = await stream.recv_message()
        self._log("SandboxWait")
        sandbox = self._sandbox(request.sandbox_id)
        give_up = asyncio.get_running_loop().time() + min(request.timeout, 50)
        while True:
            await sandbox.refresh()
            if sandbox.ended or asyncio.get_running_loop().time() >= give_up:
                break
            await asyncio.sleep(0.2)
        await stream.send_message(api_pb2.SandboxWaitResponse(result=self._result(sandbox)))

    async def SandboxTerminate(self, stream):
        request = await stream.recv_message()
        self._log("SandboxTerminate")
        sandbox = self._sandbox(request.sandbox_id)
        existing = self._result(sandbox) if sandbox.ended else None
        if not sandbox.ended:
            await sandbox.terminate()
        response = api_pb2.SandboxTerminateResponse()
        if existing is not None:
            response.existing_result.CopyFrom(existing)
        await stream.send_message(response)

    async def SandboxList(self, stream):
        request = await stream.recv_message()
        self._log("SandboxList")
        wanted = {t.tag_name: t.tag_value for t in request.tags}
        found = []
        if not request.before_timestamp:  # one page: the SDK asks again before the oldest it got
            for sandbox in self.sandboxes.values():
                await sandbox.refresh()
                if sandbox.app_id != request.app_id or (sandbox.ended and not request.include_finished):
                    continue
                if any(sandbox.tags.get(k) != v for k, v in wanted.items()):
                    continue
                found.append(api_pb2.SandboxInfo(id=sandbox.id, app_id=sandbox.app_id, created_at=time.time(),
                                                 tags=[api_pb2.SandboxTag(tag_name=k, tag_value=v)
                                                       for k, v in sandbox.tags.items()]))
        await stream.send_message(api_pb2.SandboxListResponse(sandboxes=found))

    async def SandboxTagsSet(self, stream):
        request = await stream.recv_message()
        self._log("SandboxTagsSet")
        self._sandbox(request.sandbox_id).tags = {t.tag_name: t.tag_value for t in request.tags}
        await stream.send_message(empty_pb2.Empty())

    async def SandboxGetTaskId(self, stream):
        request = await stream.recv_message()
        self._log("SandboxGetTaskId")
        sandbox = self._sandbox(request.sandbox_id)
        await sandbox.started.wait()
        await sandbox.refresh()
        response = api_pb2.SandboxGetTaskIdResponse(task_id="ta-" + sandbox.id[3:])
        if sandbox.ended:
            response.task_result.CopyFrom(self._result(sandbox))
        await stream.send_message(response)

    async def SandboxGetCommandRouterAccess(self, stream):
        request = await stream.recv_message()
        self._log("SandboxGetCommandRouterAccess")
        # The task command router is served on this same port (router.py); plain http is what the SDK allows on loopback.
        await stream.send_message(api_pb2.SandboxGetCommandRouterAccessResponse(url=self.url, jwt=self.jwt))

    async def snapshot(self, task_id):
        """TaskSnapshotFilesystem: the task's container committed, registered as an image."""
        sandbox = next((s for s in self.sandboxes.values() if "ta-" + s.id[3:] == task_id), None)
        if sandbox is None:
            raise GRPCError(Status.NOT_FOUND, "Task %s not found" % task_id)
        image_id = _new_id("im")
        tag = "localhost/fake-modal-snapshot:" + image_id
        problem = await sandbox.commit(tag)
        if problem:
            raise GRPCError(Status.INTERNAL, "snapshot failed: " + problem)
        self.images[image_id] = {"parent": None, "commands": ["FROM " + tag], "context_mount_id": "", "registry": True}
        self.committed.append(tag)
        self._log("snapshot %s %s" % (image_id, tag))
        return image_id

    async def SandboxTagsGet(self, stream):
        request = await stream.recv_message()
        self._log("SandboxTagsGet")
        sandbox = self._sandbox(request.sandbox_id)
        await stream.send_message(api_pb2.SandboxTagsGetResponse(
            tags=[api_pb2.SandboxTag(tag_name=k, tag_value=v) for k, v in sandbox.tags.items()]))

    async def AuthTokenGet(self, stream):
        await stream.recv_message()
        self._log("AuthTokenGet")
        await stream.send_message(api_pb2.AuthTokenGetResponse(token=unsigned_jwt()))


# The V2 sandbox calls (the SDK's default for sandboxes without a GPU) take
# and answer the same messages as V1 for everything gpubox uses.
for _name in ("SandboxWait", "SandboxGetTunnels", "SandboxTerminate", "SandboxList", "SandboxTagsGet", "SandboxTagsSet",
              "SandboxGetTaskId"):
    setattr(FakeModal, _name + "V2", getattr(FakeModal, _name))
