"""The `sandbox_env` fixture Inspect's self-check wants: one gpubox sandbox per
backend for the whole module (made by the provider's own sample_init, ended by
its sample_cleanup), and each check's known failure marked xfail with its reason.

GPUBOX_INSPECT_BACKENDS (comma-separated; default "local") picks the backends:
local (needs root), podman (the test image: tests/image), modal (the fake control
plane of tests/modal, whose sandboxes are podman containers of the test image)."""

import os
import shutil
import subprocess
import sys
import tempfile

import anyio
import pytest

from gpubox.inspect import GpuboxSandboxConfig, GpuboxSandboxEnvironment
from private_store import missing, store  # noqa: F401 (the private store every sandbox here is made in)

# The image the podman tests build (the CTest fixture test_images).
TEST_IMAGE = "localhost/gpubox-test-python:" + (os.environ.get("GPUBOX_TEST_IMAGE_VERSION") or "latest")
BACKENDS = [b for b in os.environ.get("GPUBOX_INSPECT_BACKENDS", "local").split(",") if b]

# Checks that cannot pass, by backend ("*": all), and why.
KNOWN_FAILURES = {
    "*": {
        "test_read_file_not_allowed": "commands and file calls run as the sandbox's root, whom chmod does not stop "
                                      "(CAP_DAC_OVERRIDE), as in Inspect's docker provider run as root",
        "test_write_text_file_without_permissions": "as test_read_file_not_allowed: root writes a file without w bits",
        "test_write_binary_file_without_permissions": "as test_read_file_not_allowed: root writes a file without "
                                                      "w bits",
    },
}


def config_for(backend: str) -> GpuboxSandboxConfig:
    if backend in ("podman", "modal"):
        return GpuboxSandboxConfig(backend=backend, image=TEST_IMAGE, timeout=1800)
    return GpuboxSandboxConfig(backend=backend, timeout=1800)


class FakeModalEnvironment:
    """The fake Modal control plane of tests/modal (the real SDK pointed at it), and this process's
    environment set as a user of the Modal backend has it, until end()."""

    def __init__(self):
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "modal"))
        from modal_harness import VENV_PYTHON, FakeModal

        self.work = tempfile.mkdtemp(prefix="gpubox-inspect-modal-")
        self.fake = FakeModal(self.work)
        self.saved = dict(os.environ)
        os.environ.update(MODAL_SERVER_URL=self.fake.url, MODAL_TOKEN_ID="ak-gpubox-test",
                          MODAL_TOKEN_SECRET="as-gpubox-test", GPUBOX_PYTHON=VENV_PYTHON,
                          HOME=os.path.join(self.work, "home"))

    def end(self):
        os.environ.clear()
        os.environ.update(self.saved)
        self.fake.stop()
        shutil.rmtree(self.work, ignore_errors=True)


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture(scope="module", params=BACKENDS)
def shared_sandbox(request, store):
    if request.param == "local" and os.geteuid() != 0:
        missing("the local backend needs root")
    if request.param != "local" and subprocess.run(["podman", "image", "exists", TEST_IMAGE]).returncode != 0:
        missing("the image %s is missing (ctest -R image_build_test_images builds it)" % TEST_IMAGE)
    config = config_for(request.param)
    modal = FakeModalEnvironment() if request.param == "modal" else None
    try:
        environments = anyio.run(GpuboxSandboxEnvironment.sample_init, "self_check", config, {})
        yield request.param, environments["default"]
        anyio.run(GpuboxSandboxEnvironment.sample_cleanup, "self_check", config, environments, False)
    finally:
        if modal:
            modal.end()


@pytest.fixture
def sandbox_env(request, shared_sandbox):
    backend, environment = shared_sandbox
    name = request.node.originalname
    reason = KNOWN_FAILURES.get(backend, {}).get(name) or KNOWN_FAILURES["*"].get(name)
    if reason:
        request.node.add_marker(pytest.mark.xfail(reason=reason, strict=True))
    return environment
