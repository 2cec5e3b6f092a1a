"""gpubox.Sandbox against real local sandboxes made by the real CLI: every
SandboxConfig field that a CPU host can honour (env, secrets, files, dirs,
volumes, a local pip package, a local git repo cloned and installed editable),
exec / exec_python / files / upload / download, connect, snapshot and
from_snapshot, terminate, the context manager, and failures that leave no
sandbox behind. One sandbox serves the read-mostly tests.

Run by ctest (python_api_sandbox) with Debian's /usr/bin/python3, which is also
the sandboxes' python; needs root and GPUBOX_CLI.
"""
import os
import secrets
import subprocess
import tempfile
import unittest

import gpubox
from local_sandboxes import PrivateState, require_root_and_cli

PYTHON = "/usr/bin/python3"
state = None


def setUpModule():
    global state
    require_root_and_cli()
    state = PrivateState("gpubox-py-sandbox-")


def tearDownModule():
    if state is not None:
        state.end()


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def make_package(root, name, value):
    """A pip-installable project (setuptools) whose module `name` holds VALUE."""
    write(os.path.join(root, "pyproject.toml"), '[build-system]\nrequires = ["setuptools"]\n'
          'build-backend = "setuptools.build_meta"\n[project]\nname = "%s"\nversion = "1.0"\n'
          '[tool.setuptools]\npy-modules = ["%s"]\n' % (name.replace("_", "-"), name))
    write(os.path.join(root, name + ".py"), "VALUE = %r\n" % value)


def make_bare_repo(root):
    """A bare git repository (root/tool.git) of a project with module gpubox_test_tool."""
    work = os.path.join(root, "tool-work")
    make_package(work, "gpubox_test_tool", "from the repo")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", work]
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "tool"]):
        subprocess.run(git + args, check=True, capture_output=True)
    bare = os.path.join(root, "tool.git")
    subprocess.run(["git", "clone", "-q", "--bare", work, bare], check=True, capture_output=True)
    return bare


class SandboxTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        root = cls.root = os.path.join(state.root, "inputs")
        write(os.path.join(root, "notes.txt"), "a local file\n")
        write(os.path.join(root, "tree", "a.txt"), "A")
        write(os.path.join(root, "tree", "sub", "b.txt"), "B")
        make_package(os.path.join(root, "pkg"), "gpubox_test_pkg", 42)
        cls.volume = os.path.join(root, "volume")
        os.makedirs(cls.volume)
        cls.secret = "tok-" + secrets.token_hex(8)
        os.environ["GPUBOX_PY_TEST_TOKEN"] = cls.secret
        cls.config = gpubox.SandboxConfig(
            python=PYTHON, timeout=600, idle_timeout=500, cpu=1.5, memory="2GiB", env={"GREETING": "hello"},
            secrets=["GPUBOX_PY_TEST_TOKEN"], local_files=[(os.path.join(root, "notes.txt"), "/data/in/notes.txt")],
            local_dirs=[(os.path.join(root, "tree"), "/data/tree")], volumes={"/mnt/vol": cls.volume},
            python_packages=[os.path.join(root, "pkg")],
            repos=[gpubox.RepoConfig(make_bare_repo(root), install=True)])
        cls.box = gpubox.Sandbox(cls.config).start(name="py-api-box")

    @classmethod
    def tearDownClass(cls):
        cls.box.terminate()

    def test_properties_and_connect(self):
        self.assertEqual(self.box.name, "py-api-box")
        self.assertEqual(len(self.box.sandbox_id), 12)
        self.assertEqual(self.box.model_handles, [])
        self.assertTrue(self.box.client.call("sys.ping")["pong"])
        for key in ("py-api-box", self.box.sandbox_id, self.box.sandbox_id[:6]):
            other = gpubox.Sandbox.connect(key)
            self.assertEqual((other.sandbox_id, other.name), (self.box.sandbox_id, "py-api-box"))
            self.assertEqual(other.exec("hostname").stdout, "py-api-box\n")
            self.assertEqual(other.exec_python("import sys; print(sys.executable)").stdout, PYTHON + "\n")
            other.client.close()
        with self.assertRaises(LookupError):
            gpubox.Sandbox.connect("no-such-box")

    def test_exec(self):
        shell = self.box.exec("echo out; echo err >&2; exit 3")
        self.assertEqual((shell.stdout, shell.stderr, shell.returncode, shell.timed_out), ("out\n", "err\n", 3, False))
        self.assertEqual(str(shell), "out\n")
        argv = self.box.exec(["echo", "$HOME", "a b"])
        self.assertEqual((argv.stdout, argv.returncode), ("$HOME a b\n", 0), "a list is argv, no shell")
        self.assertEqual(self.box.exec("pwd; echo $X", cwd="/data", env={"X": "y"}).stdout, "/data\ny\n")
        self.assertEqual(self.box.exec("cat", stdin="fed").stdout, "fed")
        slow = self.box.exec("echo started; sleep 30", timeout=1)
        self.assertTrue(slow.timed_out)
        self.assertEqual((slow.stdout, slow.returncode), ("started\n", -9))
        self.assertEqual(self.box.exec(["false"]).returncode, 1)

    def test_exec_python(self):
        ran = self.box.exec_python("import sys; print(sys.executable); sys.exit(4)")
        self.assertEqual((ran.stdout, ran.returncode), (PYTHON + "\n", 4))

    def test_env_and_secret(self):
        self.assertEqual(self.box.exec("echo $GREETING $GPUBOX_PY_TEST_TOKEN").stdout, "hello %s\n" % self.secret)
        leaked = []
        for folder, _, names in os.walk(state.store):
            for name in names:
                path = os.path.join(folder, name)
                if os.path.isfile(path) and not os.path.islink(path):
                    with open(path, "rb") as f:
                        if self.secret.encode() in f.read():
                            leaked.append(path)
        self.assertEqual(leaked, [], "the secret's value is in no file of the CLI's store")

    def test_limits_reach_the_cli(self):
        record = gpubox.find(self.box.sandbox_id)
        self.assertEqual((record["spec"]["cpu"], record["spec"]["memory_mib"], record["spec"]["timeout_s"],
                          record["spec"]["idle_timeout_s"], record["spec"]["network"]), (1.5, 2048, 600, 500, "none"))
        beat = self.box.client.call("sys.heartbeat")
        self.assertEqual(beat["idle_timeout_s"], 500)
        self.assertLessEqual(beat["deadline_in_s"], 600)

    def test_usage(self):
        report = self.box.usage()  # gpubox usage ID --json
        self.assertEqual((report["id"], report["backend"], report["state"]), (self.box.sandbox_id, "local", "running"))
        requested = report["requested"]
        self.assertEqual((requested["cpu"], requested["memory_mib"], requested["timeout_s"], requested["idle_timeout_s"]),
                         (1.5, 2048, 600, 500))
        direct = self.box.client.usage()  # sys.usage alone
        self.assertGreaterEqual(direct["container_s"], report["usage"]["container_s"])
        self.assertLessEqual(direct["container_s"], report["since_create_s"] + 2)
        self.assertGreater(direct["cpu_s"], 0)
        self.assertEqual(direct["gpu_s"], direct["gpus"]["count"] * direct["container_s"])

    def test_files(self):
        self.box.write_file("/workspace/deep/dir/note.txt", "héllo")
        self.assertEqual(self.box.read_file("/workspace/deep/dir/note.txt"), "héllo")
        for size in (0, 100, 3 << 20):  # empty, in the body, as attachments and read back in chunks
            data = os.urandom(size)
            self.box.write_file("/workspace/blob.bin", data, mode=0o600)
            self.assertEqual(self.box.read_file("/workspace/blob.bin", binary=True), data)
        self.assertEqual(self.box.exec("stat -c %a /workspace/blob.bin").stdout, "600\n")
        self.box.ensure_dir("/workspace/x/y/z")
        self.box.ensure_dir("/workspace/x/y/z")
        self.assertEqual(self.box.exec("test -d /workspace/x/y/z").returncode, 0)
        with self.assertRaises(gpubox.RpcError) as raised:
            self.box.read_file("/workspace/missing.txt")
        self.assertEqual(raised.exception.code, "not_found")

    def test_relative_file_paths_are_under_the_workspace(self):
        self.box.write_file("rel/dir/note.txt", "relative")  # as the CLI's put and MCP's file tools take them
        self.assertEqual(self.box.exec("cat /workspace/rel/dir/note.txt").stdout, "relative")
        self.assertEqual(self.box.read_file("rel/dir/note.txt"), "relative")
        self.box.ensure_dir("rel/made")
        self.assertEqual(self.box.exec("test -d /workspace/rel/made").returncode, 0)
        with self.assertRaises(gpubox.RpcError) as raised:
            self.box.read_file("rel/missing.txt")
        self.assertIn("/workspace/rel/missing.txt", raised.exception.message)

    def test_local_files_dirs_and_volumes(self):
        self.assertEqual(self.box.read_file("/data/in/notes.txt"), "a local file\n")
        self.assertEqual(self.box.exec("cat /data/tree/a.txt /data/tree/sub/b.txt").stdout, "AB")
        self.box.exec("echo from-sandbox > /mnt/vol/out.txt")
        with open(os.path.join(self.volume, "out.txt")) as f:
            self.assertEqual(f.read(), "from-sandbox\n")

    def test_upload_and_download(self):
        with tempfile.TemporaryDirectory(dir=state.root) as scratch:
            self.box.upload(os.path.join(self.root, "tree"), "/workspace/up")
            self.box.ensure_dir("/workspace/merge")
            self.box.write_file("/workspace/merge/kept.txt", "kept")
            self.box.upload(os.path.join(self.root, "tree"), "/workspace/merge")
            listing = self.box.exec("cd /workspace && find up merge -type f | sort").stdout.split()
            self.assertEqual(listing, ["merge/a.txt", "merge/kept.txt", "merge/sub/b.txt", "up/a.txt", "up/sub/b.txt"])
            self.box.upload(os.path.join(self.root, "notes.txt"), "/workspace/new/dir/n.txt")
            self.box.download("/workspace/new/dir/n.txt", os.path.join(scratch, "n.txt"))
            self.box.download("/workspace/up", os.path.join(scratch, "up"))
            with open(os.path.join(scratch, "n.txt")) as f:
                self.assertEqual(f.read(), "a local file\n")
            with open(os.path.join(scratch, "up", "sub", "b.txt")) as f:
                self.assertEqual(f.read(), "B")

    def test_python_package_and_repo(self):
        ran = self.box.exec_python("import gpubox_test_pkg; print(gpubox_test_pkg.VALUE)")
        self.assertEqual((ran.stdout, ran.returncode), ("42\n", 0), ran.stderr)
        self.assertEqual(self.box.exec("git -C /workspace/tool log --format=%s").stdout, "tool\n")
        tool = self.box.exec_python("import gpubox_test_tool as t; print(t.VALUE, t.__file__)")
        self.assertEqual(tool.stdout, "from the repo /workspace/tool/gpubox_test_tool.py\n", tool.stderr)

    def test_snapshot_and_from_snapshot(self):
        self.box.write_file("/workspace/keep.txt", "before")
        snapshot = self.box.snapshot("before the change")
        self.assertTrue(snapshot.name.startswith("before-the-change-"), snapshot.name)
        self.assertEqual(snapshot.description, "before the change")
        self.box.write_file("/workspace/keep.txt", "after")
        override = gpubox.SandboxConfig(python=PYTHON, cpu=0.5, timeout=300, python_packages=["never-installed"],
                                      network=True)
        restored = gpubox.Sandbox.from_snapshot(snapshot, config=override, name="py-api-restored")
        try:
            self.assertEqual(restored.name, "py-api-restored")
            spec = gpubox.find(restored.sandbox_id)["spec"]
            self.assertEqual((spec["cpu"], spec["timeout_s"], spec["memory_mib"]), (0.5, 300, 2048),
                             "the config's limits override the snapshot's, the others are kept")
            self.assertEqual(restored.read_file("/workspace/keep.txt"), "before")
            pkg = restored.exec_python("import gpubox_test_pkg; print(gpubox_test_pkg.VALUE)")
            self.assertEqual(pkg.stdout, "42\n", "installed packages are in the snapshot: " + pkg.stderr)
            self.assertEqual(restored.exec("echo $GREETING").stdout, "hello\n")
        finally:
            restored.terminate()
        self.assertEqual(self.box.read_file("/workspace/keep.txt"), "after")


class LifecycleTest(unittest.TestCase):
    def test_context_manager_terminates(self):
        with gpubox.Sandbox(gpubox.SandboxConfig(python=PYTHON)) as box:
            sandbox_id = box.sandbox_id
            self.assertEqual(box.exec("echo hi").stdout, "hi\n")
        with self.assertRaises(LookupError):
            gpubox.find(sandbox_id)
        with self.assertRaisesRegex(gpubox.SandboxError, "not started"):
            box.exec("true")

    def test_terminate_with_a_snapshot(self):
        box = gpubox.Sandbox(gpubox.SandboxConfig(python=PYTHON)).start()
        box.write_file("/workspace/final.txt", "last words")
        snapshot = box.terminate(save_snapshot=True, snapshot_description="final state")
        self.assertIsInstance(snapshot, gpubox.Snapshot)
        self.assertIsNone(box.terminate(), "a second terminate does nothing")
        again = gpubox.Sandbox.from_snapshot(snapshot.name)
        try:
            self.assertEqual(again.read_file("/workspace/final.txt"), "last words")
        finally:
            again.terminate()

    def test_a_refused_create_is_a_clear_error_and_leaves_nothing(self):
        if os.path.exists("/dev/nvidia0"):
            self.skipTest("this host has a GPU")
        before = gpubox.sandboxes()
        with self.assertRaisesRegex(gpubox.SandboxError, "gpu"):
            gpubox.Sandbox(gpubox.SandboxConfig(gpu="A100")).start()
        self.assertEqual(gpubox.sandboxes(), before)

    def test_a_failed_setup_step_ends_the_sandbox(self):
        empty = tempfile.mkdtemp(dir=state.root)
        before = gpubox.sandboxes()
        with self.assertRaises(gpubox.SandboxError) as raised:
            gpubox.Sandbox(gpubox.SandboxConfig(python=PYTHON, python_packages=[empty])).start()
        self.assertIn("SandboxConfig.python_packages", str(raised.exception))
        self.assertIn("exit code", str(raised.exception))
        self.assertEqual(gpubox.sandboxes(), before)


if __name__ == "__main__":
    unittest.main()
