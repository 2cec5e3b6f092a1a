"""What the Modal backend's tests share: the fake Modal control plane
(fake_modal/, the real SDK pointed at it with MODAL_SERVER_URL and test
credentials), a private gpubox store, and the real `gpubox` CLI run with the
environment a user of the Modal backend would have. The sandboxes run the
image the podman tests build (tests/image, the CTest fixture test_images:
localhost/gpubox-test-python, the CUDA + PyTorch stand-in); the SDK's
add_local_file adds this build's agent over the one it holds and its
ENTRYPOINT is cleared, as with any registry image on Modal."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from prerequisite import missing  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CLI = os.environ.get("GPUBOX_CLI", "")
VENV_PYTHON = os.environ.get("GPUBOX_VENV_PYTHON", sys.executable)
IMAGE = os.environ.get("GPUBOX_MODAL_TEST_IMAGE") or (
    "localhost/gpubox-test-python:" + (os.environ.get("GPUBOX_TEST_IMAGE_VERSION") or "latest"))


def podman(*args, check=False):
    return subprocess.run(["podman", *args], capture_output=True, text=True, check=check)


def problem():
    """Why these tests cannot run here, or ""."""
    if not CLI or not os.access(CLI, os.X_OK):
        return "GPUBOX_CLI is not set to the gpubox CLI"
    if shutil.which("podman") is None:
        return "podman is not installed (scripts/setup_images.sh)"
    if podman("image", "exists", IMAGE).returncode != 0:
        return "the image %s is missing (ctest -R image_build_test_images builds it)" % IMAGE
    if subprocess.run([VENV_PYTHON, "-c", "import modal, grpclib"], capture_output=True).returncode != 0:
        return "%s has no modal SDK (scripts/setup_python.sh)" % VENV_PYTHON
    return ""


class FakeModal:
    """One fake control plane process; stop() ends it and the containers it started."""

    def __init__(self, work, blackhole=False, secrets=None, open_network=None, process_sandboxes=False):
        self.work = work
        self.url_file = os.path.join(work, "url")
        self.calls_file = os.path.join(work, "calls")
        self.volumes_dir = os.path.join(work, "volumes")
        os.makedirs(self.volumes_dir)
        argv = [VENV_PYTHON, "-m", "fake_modal", "--url-file", self.url_file, "--calls", self.calls_file,
                "--volumes-dir", self.volumes_dir]
        if blackhole:
            argv.append("--blackhole-tunnels")
        if open_network:
            argv += ["--open-network", open_network]
        if process_sandboxes:  # the agent as a host process: no podman, no image
            argv.append("--process-sandboxes")
        env = dict(os.environ, FAKE_MODAL_SECRETS=json.dumps(secrets or {}), PYTHONDONTWRITEBYTECODE="1")
        self.log = open(os.path.join(work, "fake.log"), "w")
        self.process = subprocess.Popen(argv, cwd=HERE, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        give_up = time.monotonic() + 30
        while not os.path.exists(self.url_file):
            if self.process.poll() is not None or time.monotonic() > give_up:
                raise RuntimeError("the fake Modal control plane did not start: see %s/fake.log" % work)
            time.sleep(0.05)
        with open(self.url_file) as f:
            self.url = f.read().strip()

    def calls(self):
        try:
            with open(self.calls_file) as f:
                return f.read().splitlines()
        except FileNotFoundError:
            return []

    def definitions(self):
        return [json.loads(line[len("definition "):]) for line in self.calls() if line.startswith("definition ")]

    def containers(self, running_only=False):
        """The fake's containers: {name: status}."""
        args = ["ps", "--format", "{{.Names}} {{.State}}", "--filter", "label=fake-modal.sandbox"]
        if not running_only:
            args.insert(1, "--all")
        out = podman(*args).stdout.split("\n")
        # This fake's own (it logs each `podman create --name NAME`): other checkouts may run fakes at the same time.
        own = {line.split()[3] for line in self.calls() if line.startswith("podman create --name ")}
        return dict(line.split(" ", 1) for line in out if line.strip() and line.split(" ", 1)[0] in own)

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


NAMED_SECRETS = {"shared": {"SHARED_KEY": "shared-value-31337"}}
_shared = {}  # the fake most test classes share (one agent upload), stopped by stop_shared_fake


def shared_fake():
    if "fake" not in _shared:
        _shared["work"] = tempfile.mkdtemp(prefix="gpubox-modal-fake-")
        _shared["fake"] = FakeModal(_shared["work"], secrets=NAMED_SECRETS)
    return _shared["fake"]


def stop_shared_fake():
    """For tearDownModule: ends the shared fake and the containers it started."""
    if "fake" in _shared:
        _shared.pop("fake").stop()
        shutil.rmtree(_shared.pop("work"), ignore_errors=True)


class ModalTestCase(unittest.TestCase):
    """A private store per test class, on the shared fake control plane (its own one with blackhole)."""

    blackhole = False
    open_network = None  # podman's --network for sandboxes Modal lets out; set: the class gets a fake of its own

    @classmethod
    def setUpClass(cls):
        why = problem()
        if why:
            missing(why)
        cls.work = tempfile.mkdtemp(prefix="gpubox-modal-test-")
        cls.own_fake = cls.blackhole or bool(cls.open_network)
        cls.fake = (FakeModal(cls.work, blackhole=cls.blackhole, secrets=NAMED_SECRETS, open_network=cls.open_network)
                    if cls.own_fake else shared_fake())
        cls.home = os.path.join(cls.work, "home")
        os.makedirs(cls.home)
        cls.env = {k: v for k, v in os.environ.items() if not k.startswith("MODAL_")}
        cls.env.update(HOME=cls.home, XDG_STATE_HOME=os.path.join(cls.work, "state"), MODAL_SERVER_URL=cls.fake.url,
                       MODAL_TOKEN_ID="ak-gpubox-test", MODAL_TOKEN_SECRET="as-gpubox-test",
                       GPUBOX_PYTHON=VENV_PYTHON, PYTHONDONTWRITEBYTECODE="1")

    @classmethod
    def tearDownClass(cls):
        if not hasattr(cls, "fake"):
            return
        subprocess.run([CLI, "terminate", "--all"], env=cls.env, capture_output=True, timeout=120)
        left = cls.fake.containers(running_only=True)
        if cls.own_fake:
            cls.fake.stop()
        shutil.rmtree(cls.work, ignore_errors=True)
        assert not left, "sandboxes left running after terminate --all: %s" % left

    def gpubox(self, *args, env=None, timeout=180, input=None):
        return subprocess.run([CLI, *args], env=env or self.env, capture_output=True, text=True, timeout=timeout,
                              input=input)

    def ok(self, *args, **kwargs):
        ran = self.gpubox(*args, **kwargs)
        self.assertEqual(ran.returncode, 0, "gpubox %s: %s%s" % (" ".join(args), ran.stdout, ran.stderr))
        return ran.stdout

    def create(self, *args, **kwargs):
        out = self.ok("--json", "create", "--backend", "modal", "--image", IMAGE, *args, **kwargs)
        return json.loads(out)["id"]

    def record(self, sandbox_id):
        return json.loads(self.ok("info", sandbox_id, "--json"))

    def store_ids(self):
        return [r["id"] for r in json.loads(self.ok("ls", "--json"))]

    def container_of(self, sandbox_id):
        return "fake-modal-" + self.record(sandbox_id)["spec"]["modal_id"]
