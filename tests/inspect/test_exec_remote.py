"""exec_remote, which Inspect's sandbox tools use: Inspect's own implementation
(it injects its sandbox-tools binary with write_file and polls it with exec) on
a gpubox sandbox, awaited and streamed, through the proxy a sample's
sandbox() returns."""

import pytest
from inspect_ai.util import ExecCompleted, ExecStderr, ExecStdout
from inspect_ai.util._sandbox.events import SandboxEnvironmentProxy

pytestmark = pytest.mark.anyio


async def test_exec_remote_awaited_returns_the_commands_result(sandbox_env):
    result = await SandboxEnvironmentProxy(sandbox_env).exec_remote(
        ["sh", "-c", "echo out; echo err >&2; exit 3"], stream=False)
    assert (result.returncode, result.stdout, result.stderr) == (3, "out\n", "err\n")


async def test_exec_remote_streams_output_then_completes(sandbox_env):
    process = await SandboxEnvironmentProxy(sandbox_env).exec_remote(
        ["sh", "-c", "for i in 1 2 3; do echo $i; sleep 0.3; done; echo done >&2"])
    stdout, stderr, completed = "", "", []
    async for event in process:
        if isinstance(event, ExecStdout):
            stdout += event.data
        elif isinstance(event, ExecStderr):
            stderr += event.data
        elif isinstance(event, ExecCompleted):
            completed.append(event.exit_code)
    assert (stdout, stderr, completed) == ("1\n2\n3\n", "done\n", [0])
