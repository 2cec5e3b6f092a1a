"""The Kubernetes backend through the real CLI and the official Kubernetes
client against a real kube-apiserver (cluster.py) that validates everything
gpubox sends against agent-sandbox's and Kueue's real CRDs; the test
controller plays agent-sandbox's controller, Kueue and the node, whose pods
are podman containers of the test image with the real agent as PID 1.
After each test, nothing gpubox created is left in its namespace.
Interpreter: build/venv/bin/python (the kubernetes client is in the venv)."""

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "python_models"))
from cluster import TestCluster  # noqa: E402

CLI = os.environ.get("GPUBOX_CLI", "")
VENV_PYTHON = os.environ.get("GPUBOX_VENV_PYTHON", sys.executable)
IMAGE = "localhost/gpubox-test-python:" + (os.environ.get("GPUBOX_TEST_IMAGE_VERSION") or "latest")
PYTHON_DIR = os.path.join(HERE, "..", "..", "python")
_cluster = {}


def shared_cluster():
    if "cluster" not in _cluster:
        _cluster["work"] = tempfile.mkdtemp(prefix="gpubox-k8s-test-")
        _cluster["cluster"] = TestCluster().start(os.path.join(_cluster["work"], "cluster"))
    return _cluster["cluster"]


def tearDownModule():
    if "cluster" in _cluster:
        _cluster.pop("cluster").stop()
        shutil.rmtree(_cluster.pop("work"), ignore_errors=True)


class KubernetesTestCase(unittest.TestCase):
    """A private store and a fresh namespace per test, on the shared cluster; nothing may be left after it."""

    def setUp(self):
        if not CLI or not os.access(CLI, os.X_OK):
            self.fail("GPUBOX_CLI is not set to the gpubox CLI")
        self.cluster = shared_cluster()
        self.work = tempfile.mkdtemp(prefix="gpubox-k8s-case-")
        self.ns = self.cluster.namespace("t-" + self.id().rsplit(".", 1)[-1][5:].replace("_", "-")[:40] + "-"
                                         + os.urandom(2).hex())
        self.env = dict(os.environ, HOME=os.path.join(self.work, "home"), XDG_STATE_HOME=os.path.join(self.work, "state"),
                        KUBECONFIG=self.cluster.kubeconfig, GPUBOX_PYTHON=VENV_PYTHON, PYTHONDONTWRITEBYTECODE="1")
        os.makedirs(self.env["HOME"])

    def tearDown(self):
        self.gpubox("terminate", "--all", timeout=300)
        self.doCleanups()  # the test's own objects (a PVC) go first
        left = self.cluster.objects(self.ns)
        shutil.rmtree(self.work, ignore_errors=True)
        self.assertEqual(left, [], "left in namespace %s after the test" % self.ns)

    def gpubox(self, *args, env=None, timeout=300):
        return subprocess.run([CLI, *args], env=env or self.env, capture_output=True, text=True, timeout=timeout)

    def ok(self, *args, **kwargs):
        ran = self.gpubox(*args, **kwargs)
        self.assertEqual(ran.returncode, 0, "gpubox %s: %s%s" % (" ".join(args), ran.stdout, ran.stderr))
        return ran.stdout

    def create(self, *args, **kwargs):
        out = self.ok("--json", "create", "--backend", "kubernetes", "--namespace", self.ns, *args, **kwargs)
        return json.loads(out)["id"]

    def record(self, sandbox_id):
        return json.loads(self.ok("info", sandbox_id, "--json"))

    def custom(self):
        from kubernetes import client
        return client.CustomObjectsApi(self.cluster.api)

    def core(self):
        from kubernetes import client
        return client.CoreV1Api(self.cluster.api)

    def refused(self, ran, text):
        """A clear error naming text, and nothing created in the namespace."""
        self.assertNotEqual(ran.returncode, 0, ran.stdout)
        self.assertIn(text, ran.stderr)
        self.assertEqual(self.cluster.objects(self.ns), [])
        self.assertEqual(json.loads(self.ok("ls", "--json")), [])


class SandboxLifeTest(KubernetesTestCase):
    def test_create_exec_kernel_job_model_terminate(self):
        # A model on a PersistentVolumeClaim (the node's directory for it holds the model fixture's tiny Llama).
        from model_harness import check_notebook_cell, fixture, notebook_cell
        import gpubox
        refs = fixture()
        self.core().create_namespaced_persistent_volume_claim(self.ns, {
            "metadata": {"name": "weights"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
        self.addCleanup(self.delete_claim, "weights")
        shutil.copytree(refs["llama"], os.path.join(self.cluster.work_dir, "node", "pvcs", self.ns, "weights", "tiny"))
        config = os.path.join(self.work, "config.json")
        with open(config, "w") as f:
            json.dump({"model_host": {"models": [{"name": "tiny", "path": "/weights/tiny"}]}}, f)
        started = time.monotonic()
        sandbox = self.create("--name", "life", "--image", IMAGE, "--timeout", "600", "--gpu", "1", "--cpu", "2",
                              "--memory", "4096", "--config", config, "--volume", "weights:/weights")
        create_s = time.monotonic() - started
        info = self.record(sandbox)
        name = "gpubox-" + sandbox
        self.assertEqual((info["backend"], info["state"]), ("kubernetes", "running"))
        self.assertEqual(info["spec"]["kubernetes_id"], name)
        self.assertEqual(info["endpoint"], "tcp://%s:7000" % info["spec"]["kubernetes"]["pod_ip"])

        # What the API server holds: the Sandbox as gpubox asked for it, the Secret it mounts.
        box = self.custom().get_namespaced_custom_object("agents.x-k8s.io", "v1beta1", self.ns, "sandboxes", name)
        pod = box["spec"]["podTemplate"]["spec"]
        container = pod["containers"][0]
        self.assertEqual(container["image"], IMAGE)
        self.assertEqual(container["args"], ["--config", "/run/gpubox-config/config.json"])
        self.assertEqual(container["resources"]["limits"], {"nvidia.com/gpu": "1", "cpu": "2", "memory": "4096Mi"})
        self.assertNotIn("env", container)  # the keys travel as a file only
        self.assertEqual(pod["volumes"][0], {"name": "gpubox-config", "secret": {
            "secretName": name, "defaultMode": 0o400, "items": [{"key": "config.json", "path": "config.json"}]}})
        self.assertEqual(pod["volumes"][1]["persistentVolumeClaim"], {"claimName": "weights"})
        self.assertEqual(box["spec"]["shutdownPolicy"], "Delete")
        self.assertIn("shutdownTime", box["spec"])
        secret = self.core().read_namespaced_secret(name, self.ns)
        self.assertEqual(secret.metadata.owner_references[0].uid, box["metadata"]["uid"])
        agent_config = json.loads(base64.b64decode(secret.data["config.json"]))
        with open(self.client_keys_file(sandbox)) as f:
            self.assertEqual(agent_config["rpc"]["authorized_keys"], [json.load(f)["public_key"]])

        # The agent is PID 1 of the pod; no key is in what its children inherit.
        self.assertEqual(self.ok("exec", sandbox, "--", "sh", "-c", "cat /proc/1/comm; pwd").split(),
                         ["gpubox-agent", "/workspace"])
        self.assertNotIn(agent_config["rpc"]["secret_key"], self.ok("exec", sandbox, "--", "env"))

        self.assertEqual(self.gpubox("exec", sandbox, "--", "sh", "-c", "exit 7").returncode, 7)
        cell = json.loads(self.ok("run-code", sandbox, "x = 6 * 7\nprint(x)", "--json"))
        self.assertEqual((cell["status"], cell["stdout"]), ("ok", "42\n"))
        job = self.ok("submit", sandbox, "--", "mkdir -p out && echo result > out/r.txt").strip()
        self.ok("wait", sandbox, job, "--timeout", "60")
        outputs = os.path.join(self.work, "job-out")
        self.ok("result", sandbox, job, "--out", outputs)
        with open(os.path.join(outputs, "out", "r.txt")) as f:
            self.assertEqual(f.read(), "result\n")

        # The model host, from a notebook cell and from this process (the Python API, through the pod IP).
        os.environ["XDG_STATE_HOME"] = self.env["XDG_STATE_HOME"]
        try:
            with gpubox.connect(sandbox) as client:
                model = client.model("tiny")
                model.wait_ready(timeout=180)
                got = json.loads(self.ok("run-code", sandbox, notebook_cell(refs)).splitlines()[-1])
                check_notebook_cell(self, got, model, refs)
        finally:
            del os.environ["XDG_STATE_HOME"]

        # GPU-hours as for the container backends: the count asked for.
        usage = json.loads(self.ok("usage", sandbox, "--json"))
        self.assertEqual(usage["requested"]["gpu"], {"type": "nvidia.com/gpu", "count": 1})

        done = json.loads(self.ok("terminate", sandbox, "--json"))
        self.assertFalse(done[0]["killed"])  # the agent shut down by itself
        self.assertEqual(self.cluster.objects(self.ns), ["PersistentVolumeClaim/weights"])  # the user's
        self.assertEqual(json.loads(self.ok("ls", "--json")), [])
        print("create to ready: %.2f s" % create_s, file=sys.stderr)

    def delete_claim(self, name):
        """Deletes the PVC (the user's), and waits until the test controller let it go (pvc-protection)."""
        self.core().delete_namespaced_persistent_volume_claim(name, self.ns)
        self.cluster.wait("PVC %s gone" % name, lambda: "PersistentVolumeClaim/" + name not in self.cluster.objects(self.ns))

    def client_keys_file(self, sandbox):
        return os.path.join(self.env["XDG_STATE_HOME"], "gpubox", "sandboxes", sandbox, "client_keys.json")

    def test_dead_after_a_delete_from_outside_and_adopt_after_the_store_is_lost(self):
        sandbox = self.create("--image", IMAGE)
        info = self.record(sandbox)
        with open(self.client_keys_file(sandbox)) as f:
            keys = dict(json.load(f), server_key=info["spec"]["server_key"])
        keys_file = os.path.join(self.work, "keys.json")
        with open(keys_file, "w") as f:
            json.dump(keys, f)
        # ls --remote finds it by gpubox's label.
        rows = json.loads(self.ok("ls", "--remote", "--backend", "kubernetes", "--namespace", self.ns, "--json"))
        self.assertEqual([(r["kubernetes_id"], r["gpubox_id"], r["in_store"]) for r in rows],
                         [("gpubox-" + sandbox, sandbox, True)])
        # Another CLI with an empty store (as after a host restart) adopts it with its keys.
        other = dict(self.env, XDG_STATE_HOME=os.path.join(self.work, "state2"))
        adopted = json.loads(self.ok("adopt", "gpubox-" + sandbox, "--keys", keys_file, "--namespace", self.ns,
                                     "--name", "found", "--json", env=other))
        self.assertEqual(adopted["backend"], "kubernetes")
        self.assertEqual(self.ok("exec", "found", "--", "echo", "back", env=other), "back\n")
        ran = self.gpubox("adopt", "gpubox-" + sandbox, "--keys", keys_file, "--namespace", self.ns, env=other)
        self.assertIn("in the store already", ran.stderr)
        self.ok("terminate", "found", env=other)
        self.gpubox("terminate", "--all", env=other)
        # Deleted by the second store: the first one's record is dead, ended on Kubernetes.
        listed = {r["id"]: r for r in json.loads(self.ok("ls", "--json"))}
        self.assertEqual(listed[sandbox]["state"], "dead")
        self.assertEqual(listed[sandbox]["ended"]["reason"], "ended_on_kubernetes")
        ran = self.gpubox("exec", sandbox, "--", "true")
        self.assertEqual(ran.returncode, 3)
        self.assertIn("is dead: the cluster ended it", ran.stderr)


class PythonApiAndMcpTest(KubernetesTestCase):
    def test_sandbox_config_and_mcp_tools(self):
        import gpubox
        saved = dict(os.environ)
        os.environ.update(self.env)  # Sandbox runs `gpubox` with this process's environment
        try:
            config = gpubox.SandboxConfig(backend="kubernetes", image=IMAGE, cpu=1, memory="512MiB", timeout=300,
                                          env={"MODE": "api"}, kubernetes={"namespace": self.ns})
            sandbox = gpubox.Sandbox(config).start(name="api-box")
            try:
                ran = sandbox.exec("cat /proc/1/comm; echo $MODE; exit 3")
                self.assertEqual((ran.stdout, ran.returncode), ("gpubox-agent\napi\n", 3))
                sandbox.write_file("/workspace/notes.txt", "through the pod IP\n")
                self.assertEqual(sandbox.read_file("/workspace/notes.txt"), "through the pod IP\n")
                box = self.custom().get_namespaced_custom_object("agents.x-k8s.io", "v1beta1", self.ns, "sandboxes",
                                                                 "gpubox-" + sandbox.sandbox_id)
                self.assertEqual(box["spec"]["podTemplate"]["spec"]["containers"][0]["resources"]["limits"],
                                 {"cpu": "1", "memory": "512Mi"})
                self.assertEqual(self.mcp_exec(sandbox.sandbox_id), "from mcp\n")
            finally:
                sandbox.terminate()
        finally:
            os.environ.clear()
            os.environ.update(saved)

    def mcp_exec(self, sandbox_id):
        """The exec tool of `gpubox mcp`, through the official MCP Python SDK."""
        import asyncio
        from mcp import Client, StdioServerParameters
        params = StdioServerParameters(command=CLI, args=["mcp", "--sandbox", sandbox_id],
                                       env={k: self.env[k] for k in ("XDG_STATE_HOME", "KUBECONFIG", "GPUBOX_PYTHON", "PATH")})

        async def body():
            async with Client(params) as client:
                return await client.call_tool("exec", {"command": "echo from mcp"})
        result = asyncio.run(asyncio.wait_for(body(), 120))
        self.assertFalse(result.is_error, result.content)
        return result.structured_content["stdout"]


class RealClusterScriptTest(KubernetesTestCase):
    """tests/kubernetes/check_real_cluster.sh, the check for a real cluster, passes on this one and skips without one."""

    def test_the_script_passes_on_the_test_cluster(self):
        script = os.path.join(HERE, "check_real_cluster.sh")
        skipped = subprocess.run([script], env={k: v for k, v in self.env.items() if k != "KUBECONFIG"},
                                 capture_output=True, text=True, timeout=60)
        self.assertEqual(skipped.returncode, 77, skipped.stdout + skipped.stderr)
        self.assertIn("KUBECONFIG is not set", skipped.stdout)
        ran = subprocess.run([script], env=dict(self.env, GPUBOX_CLI=CLI, GPUBOX_K8S_IMAGE=IMAGE, GPUBOX_K8S_NAMESPACE=self.ns),
                             capture_output=True, text=True, timeout=600)
        self.assertEqual(ran.returncode, 0, ran.stdout + ran.stderr)
        self.assertEqual(self.cluster.objects(self.ns), [])


class BudgetTest(KubernetesTestCase):
    def test_gpu_hours_are_held_as_for_the_container_backends(self):
        self.ok("budget", "init", "cluster", "--max-gpu-hours", "2")
        # 2 GPUs for 2 h is past the ceiling: refused before anything reaches the cluster.
        ran = self.gpubox("--json", "create", "--backend", "kubernetes", "--namespace", self.ns, "--image", IMAGE,
                          "--gpu", "2", "--timeout", "7200", "--budget", "cluster")
        self.assertEqual(json.loads(ran.stdout)["error"]["code"], "budget_exceeded", ran.stdout)
        self.assertEqual(self.cluster.objects(self.ns), [])
        created = json.loads(self.ok("--json", "create", "--backend", "kubernetes", "--namespace", self.ns, "--image",
                                     IMAGE, "--gpu", "1", "--timeout", "3600", "--budget", "cluster"))
        self.assertEqual((created["budget"]["reserved_usd"], created["budget"]["reserved_gpu_hours"]), (0.0, 1.0))
        self.ok("terminate", created["id"])
        shown = next(b for b in json.loads(self.ok("budget", "--json"))["budgets"] if b["name"] == "cluster")
        self.assertEqual(shown["reserved_gpu_hours"], 0.0)
        self.assertGreater(shown["settled_gpu_hours"], 0.0)  # the seconds it ran, on one GPU
        self.assertLess(shown["settled_gpu_hours"], 0.1)


class WarmPoolTest(KubernetesTestCase):
    def test_a_claim_on_a_warm_pool_of_the_gpubox_image(self):
        # The docs' flow: the module prints the pool's objects, which are applied (kubectl apply -f -).
        printed = subprocess.run([VENV_PYTHON, "-m", "gpubox.kubernetes_backend", "warm-pool", "pool", "--replicas", "1",
                                  "--image", IMAGE, "--namespace", self.ns], capture_output=True, text=True, check=True,
                                 env=dict(self.env, PYTHONPATH=PYTHON_DIR)).stdout
        items = json.loads(printed)["items"]
        self.assertEqual([i["kind"] for i in items], ["Secret", "SandboxTemplate", "SandboxWarmPool"])
        for item in items:
            if item["kind"] == "Secret":
                self.core().create_namespaced_secret(self.ns, item)
            else:
                group, version = item["apiVersion"].split("/")
                self.custom().create_namespaced_custom_object(group, version, self.ns, item["kind"].lower() + "s", item)
        def ready_replicas():
            pool = self.custom().get_namespaced_custom_object("extensions.agents.x-k8s.io", "v1beta1", self.ns,
                                                              "sandboxwarmpools", "pool")
            return (pool.get("status") or {}).get("readyReplicas", 0) >= 1
        self.cluster.wait("a ready member of the pool", ready_replicas, timeout=120)
        sandbox = self.create("--warm-pool", "pool", "--timeout", "300")
        info = self.record(sandbox)
        self.assertEqual(info["spec"]["kubernetes"]["kind"], "SandboxClaim")
        self.assertEqual(self.ok("exec", sandbox, "--", "cat", "/proc/1/comm"), "gpubox-agent\n")
        claim = self.custom().get_namespaced_custom_object("extensions.agents.x-k8s.io", "v1beta1", self.ns, "sandboxclaims",
                                                           "gpubox-" + sandbox)
        self.assertEqual(claim["spec"]["warmPoolRef"], {"name": "pool"})
        self.assertTrue(claim["status"]["sandbox"]["name"].startswith("pool-"), claim["status"])  # a warm member
        self.ok("terminate", sandbox)
        self.assertNotIn("SandboxClaim/gpubox-" + sandbox, self.cluster.objects(self.ns))
        # The pool is the user's: deleted here as `kubectl delete -f` would.
        self.custom().delete_namespaced_custom_object("extensions.agents.x-k8s.io", "v1beta1", self.ns, "sandboxwarmpools", "pool")
        self.custom().delete_namespaced_custom_object("extensions.agents.x-k8s.io", "v1beta1", self.ns, "sandboxtemplates", "pool")
        self.core().delete_namespaced_secret("gpubox-pool-pool", self.ns)
        self.cluster.wait("the pool's sandboxes gone", lambda: self.cluster.objects(self.ns) == [], timeout=60)


class KueueTest(KubernetesTestCase):
    def test_a_queued_sandbox_starts_when_admitted(self):
        create = subprocess.Popen([CLI, "--json", "create", "--backend", "kubernetes", "--namespace", self.ns, "--image",
                                   IMAGE, "--queue", "gpu-queue", "--ready-timeout", "120"],
                                  env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            def gated_pod():
                for pod in self.core().list_namespaced_pod(self.ns).items:
                    if pod.spec.scheduling_gates:
                        return pod
                return None
            pod = self.cluster.wait("a gated pod", gated_pod, timeout=60)
            self.assertEqual(pod.metadata.labels["kueue.x-k8s.io/queue-name"], "gpu-queue")
            time.sleep(1)
            self.assertIsNone(create.poll(), "create returned before the pod was admitted")
            self.assertEqual(self.cluster.containers(), {})
            self.cluster.admit(self.ns, pod.metadata.name)
            out, err = create.communicate(timeout=180)
        finally:
            if create.poll() is None:
                create.send_signal(signal.SIGKILL)
                create.wait()
        self.assertEqual(create.returncode, 0, err)
        sandbox = json.loads(out)["id"]
        self.assertEqual(self.ok("exec", sandbox, "--", "echo", "admitted"), "admitted\n")
        self.ok("terminate", sandbox)


class BadInputTest(KubernetesTestCase):
    def test_no_kubeconfig(self):
        env = dict(self.env, KUBECONFIG=os.path.join(self.work, "missing"))
        ran = self.gpubox("create", "--backend", "kubernetes", "--namespace", self.ns, "--image", IMAGE, env=env)
        self.refused(ran, "no usable kubeconfig")

    def test_a_namespace_that_does_not_exist(self):
        ran = self.gpubox("create", "--backend", "kubernetes", "--namespace", "nowhere-" + self.ns, "--image", IMAGE)
        self.refused(ran, "namespace 'nowhere-%s' does not exist" % self.ns)

    def test_never_ready_by_the_ready_timeout(self):
        # Queued and never admitted: given up after 3 s, and what was created is deleted.
        ran = self.gpubox("create", "--backend", "kubernetes", "--namespace", self.ns, "--image", IMAGE, "--queue",
                          "never", "--ready-timeout", "3")
        self.assertIn("was not Ready within 3 s", ran.stderr)
        self.assertIn("kueue.x-k8s.io/admission", ran.stderr)
        self.cluster.wait("nothing left", lambda: self.cluster.objects(self.ns) == [], timeout=30)
        self.refused(ran, "--ready-timeout")

    def test_a_missing_volume_claim_and_bad_flags(self):
        ran = self.gpubox("create", "--backend", "kubernetes", "--namespace", self.ns, "--image", IMAGE,
                          "--volume", "nosuch:/data")
        self.refused(ran, "PersistentVolumeClaim 'nosuch' does not exist")
        for args, text in ((["--mount", "/tmp:/x"], "--mount: not with --backend kubernetes"),
                           (["--namespace", "Bad_Name"], "is not a Kubernetes namespace name"),
                           (["--gpu", "H100"], "--gpu: expected a number of GPUs"),
                           (["--warm-pool", "p", "--env", "A=1"], "--env: not with --warm-pool")):
            self.refused(self.gpubox("create", "--backend", "kubernetes", *args), text)

    def test_agent_sandbox_not_installed(self):
        bare = TestCluster().start(os.path.join(self.work, "bare"), crds=False)
        try:
            bare.namespace(self.ns)
            env = dict(self.env, KUBECONFIG=bare.kubeconfig)
            ran = self.gpubox("create", "--backend", "kubernetes", "--namespace", self.ns, "--image", IMAGE, env=env)
            self.assertNotEqual(ran.returncode, 0)
            self.assertIn("agent-sandbox is not installed", ran.stderr)
            self.assertIn("kubectl apply -f https://github.com/kubernetes-sigs/agent-sandbox/releases", ran.stderr)
            from kubernetes import client
            core = client.CoreV1Api(bare.api)
            self.assertEqual([s.metadata.name for s in core.list_namespaced_secret(self.ns).items
                              if s.type != "kubernetes.io/service-account-token"], [])
        finally:
            bare.stop()


if __name__ == "__main__":
    unittest.main()
