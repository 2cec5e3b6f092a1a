"""The fake's task command router (modal_proto.task_command_router_grpc): the
per-task service the SDK reaches through SandboxGetCommandRouterAccess. Only
TaskSnapshotFilesystem (Sandbox.snapshot_filesystem) is answered; the rest
answers UNIMPLEMENTED, logged. One asyncio loop."""

from modal_proto import task_command_router_grpc, task_command_router_pb2

from .unimplemented import answer_unimplemented


class _Base(task_command_router_grpc.TaskCommandRouterBase):
    """Every method of the service, answering UNIMPLEMENTED."""


answer_unimplemented(_Base, "task command router", lambda router: router.service._log)


class FakeRouter(_Base):
    """Routes each call to the control plane's state (service.FakeModal)."""

    def __init__(self, service):
        self.service = service

    async def TaskSnapshotFilesystem(self, stream):
        request = await stream.recv_message()
        self.service._log("TaskSnapshotFilesystem")
        image_id = await self.service.snapshot(request.task_id)
        await stream.send_message(task_command_router_pb2.TaskSnapshotFilesystemResponse(image_id=image_id))
