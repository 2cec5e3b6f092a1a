"""SandboxUnavailableError: a call to a sample's sandbox that has ended fails
within seconds (not never: a dead agent answers nothing), naming how it ended."""

import os
import signal
import time

import anyio
import pytest
from inspect_ai.util._sandbox.environment import SandboxUnavailableError

from gpubox import find
from gpubox.inspect import GpuboxSandboxConfig, GpuboxSandboxEnvironment

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("store")]


async def _ended_sandbox_refuses(config, end, expected):
    environments = await GpuboxSandboxEnvironment.sample_init("unavailable", config, {})
    sandbox = environments["default"]
    try:
        assert (await sandbox.exec(["true"])).success
        end(sandbox)
        for call in (lambda: sandbox.exec(["true"]), lambda: sandbox.read_file("/etc/hostname"),
                     lambda: sandbox.write_file("x", "y")):
            started = time.monotonic()
            with pytest.raises(SandboxUnavailableError) as raised:
                await call()
            assert expected in str(raised.value) and sandbox.sandbox_id in str(raised.value)
            assert time.monotonic() - started < 15, "took %.1f s to notice" % (time.monotonic() - started)
    finally:
        await GpuboxSandboxEnvironment.sample_cleanup("unavailable", config, environments, False)


async def test_a_sandbox_past_its_timeout_names_the_deadline():
    await _ended_sandbox_refuses(GpuboxSandboxConfig(timeout=3), lambda _: time.sleep(4), "deadline")


async def test_a_sandbox_whose_agent_was_killed_says_so():
    def kill_agent(sandbox):
        os.kill(find(sandbox.sandbox_id)["agent_pid"], signal.SIGKILL)
    await _ended_sandbox_refuses(GpuboxSandboxConfig(), kill_agent, "agent_crashed")
