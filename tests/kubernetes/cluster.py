"""A Kubernetes cluster for gpubox's Kubernetes backend tests: the real
kube-apiserver (tests/kubernetes/apiserver, built by
scripts/setup_kubernetes.sh) on loopback, the CRDs of agent-sandbox v1.0.1 and
Kueue v0.17.0 (from the Go modules in build/deps/gomod), and controller.py
(the agent-sandbox controller, garbage collector, Kueue webhook and a podman
node) as a subprocess.

    with TestCluster(work_dir) as cluster:       # or cluster.start(work_dir) ... cluster.stop()
        cluster.namespace("t1")
        api = cluster.api                        # a kubernetes.client.ApiClient
        ... gpubox with KUBECONFIG=cluster.kubeconfig ...
        cluster.admit("t1", "pod-name")          # play Kueue admitting the Pod
        cluster.objects("t1")                    # what gpubox may have left

The API server's binary is $GPUBOX_KUBE_APISERVER, else
<checkout>/build/deps/kube-apiserver/kube-apiserver. Logs: work_dir/
kube-apiserver.log and work_dir/controller.log. stop() ends the controller
(which removes its podman containers) and then the API server."""

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKOUT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
from prerequisite import missing  # noqa: E402

import agent_sandbox  # noqa: E402
import fake_node  # noqa: E402

GOMOD = os.path.join(CHECKOUT, "build", "deps", "gomod")
CRD_GLOBS = ("sigs.k8s.io/agent-sandbox@v1.0.1/k8s/crds/*.yaml",
             "sigs.k8s.io/kueue@v0.17.0/config/components/crd/bases/*.yaml")
ADMISSION_GATE = "kueue.x-k8s.io/admission"
START_TIMEOUT = 60


def apiserver_binary():
    return os.environ.get("GPUBOX_KUBE_APISERVER") or os.path.join(
        CHECKOUT, "build", "deps", "kube-apiserver", "kube-apiserver")


def problem():
    """Why a test cluster cannot start here, or ""."""
    if not os.access(apiserver_binary(), os.X_OK):
        return "no kube-apiserver at %s (scripts/setup_kubernetes.sh builds it)" % apiserver_binary()
    try:
        import kubernetes  # noqa: F401
    except ImportError:
        return "%s has no kubernetes package (scripts/setup_python.sh)" % sys.executable
    if shutil.which("podman") is None:
        return "podman is not installed (scripts/setup_images.sh)"
    if os.geteuid() != 0:
        return "the test cluster's node runs podman containers as root"
    return ""


def crd_files():
    files = []
    for pattern in CRD_GLOBS:
        found = sorted(glob.glob(os.path.join(GOMOD, pattern)))
        if not found:
            raise RuntimeError("no CRDs at %s (scripts/setup_kubernetes.sh fetches them)" % os.path.join(GOMOD, pattern))
        files += found
    return files


def stop_process(process, timeout=30):
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class TestCluster:
    """One API server, its CRDs and the test controller; skips (fails under CI=true) where one cannot run."""

    def __init__(self, work_dir=None, crds=True):
        self.work_dir = work_dir
        self.crds = crds
        self.run_id = uuid.uuid4().hex[:8]
        self.apiserver = None
        self.controller = None
        self.kubeconfig = None
        self.url = None
        self.api = None

    def __enter__(self):
        return self.start(self.work_dir, self.crds)

    def __exit__(self, *exc):
        self.stop()

    def start(self, work_dir, crds=True):
        why = problem()
        if why:
            missing(why)
        from kubernetes import config
        self.work_dir = os.path.abspath(work_dir)
        os.makedirs(self.work_dir, exist_ok=True)
        self.kubeconfig = os.path.join(self.work_dir, "kubeconfig")
        try:
            self._start_apiserver()
            self.api = config.new_client_from_config(config_file=self.kubeconfig)
            if crds:
                self.install_crds()
            self._start_controller()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_apiserver(self):
        log_path = os.path.join(self.work_dir, "kube-apiserver.log")
        ready_path = os.path.join(self.work_dir, "kube-apiserver.out")
        with open(log_path, "w") as log, open(ready_path, "w") as out:
            self.apiserver = subprocess.Popen(
                [apiserver_binary(), "-kubeconfig", self.kubeconfig, "-data-dir", os.path.join(self.work_dir, "apiserver")],
                stdout=out, stderr=log, stdin=subprocess.DEVNULL)
        give_up = time.monotonic() + START_TIMEOUT
        while True:
            with open(ready_path) as f:
                line = f.readline()
            if line.startswith("READY "):
                self.url = line.split()[1]
                return
            if self.apiserver.poll() is not None:
                raise RuntimeError("the kube-apiserver exited (%s) before it was ready: see %s"
                                   % (self.apiserver.returncode, log_path))
            if time.monotonic() > give_up:
                raise RuntimeError("the kube-apiserver was not ready in %d s: see %s" % (START_TIMEOUT, log_path))
            time.sleep(0.05)

    def install_crds(self):
        """Creates every CRD and waits until the API server serves them all (Established)."""
        import yaml
        from kubernetes import client
        ext = client.ApiextensionsV1Api(self.api)
        names = []
        for path in crd_files():
            with open(path) as f:
                for doc in yaml.safe_load_all(f):
                    if doc and doc.get("kind") == "CustomResourceDefinition":
                        ext.create_custom_resource_definition(doc)
                        names.append(doc["metadata"]["name"])
        give_up = time.monotonic() + START_TIMEOUT
        waiting = set(names)
        while waiting:
            for name in sorted(waiting):
                conds = ext.read_custom_resource_definition_status(name).status.conditions or []
                if any(c.type == "Established" and c.status == "True" for c in conds):
                    waiting.discard(name)
            if waiting and time.monotonic() > give_up:
                raise RuntimeError("CRDs not established in %d s: %s" % (START_TIMEOUT, ", ".join(sorted(waiting))))
            if waiting:
                time.sleep(0.1)

    def _start_controller(self):
        log_path = os.path.join(self.work_dir, "controller.log")
        with open(log_path, "w") as log:
            self.controller = subprocess.Popen(
                [sys.executable, os.path.join(HERE, "controller.py"), "--kubeconfig", self.kubeconfig,
                 "--work-dir", os.path.join(self.work_dir, "node"), "--run-id", self.run_id],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
        give_up = time.monotonic() + START_TIMEOUT
        while "running (run id" not in self.controller_log():
            if self.controller.poll() is not None:
                raise RuntimeError("the test controller exited (%s): see %s" % (self.controller.returncode, log_path))
            if time.monotonic() > give_up:
                raise RuntimeError("the test controller did not start in %d s: see %s" % (START_TIMEOUT, log_path))
            time.sleep(0.05)

    def stop(self):
        """Ends the controller (it removes its containers), then the API server; idempotent."""
        stop_process(self.controller, 60)
        if self.controller is not None and self.controller.returncode not in (0, None):
            sys.stderr.write("the test controller exited %s: see %s\n" % (
                self.controller.returncode, os.path.join(self.work_dir, "controller.log")))
        for name in self.containers():  # what a controller killed mid-pass left
            fake_node.podman("rm", "--force", "--time", "0", name)
        stop_process(self.apiserver)
        if self.api is not None:
            self.api.close()
            self.api = None

    # --- what tests use ---

    def namespace(self, name):
        from kubernetes import client
        client.CoreV1Api(self.api).create_namespace({"metadata": {"name": name}})
        return name

    def admit(self, namespace, pod_name):
        """Kueue admitting the Pod: its kueue.x-k8s.io/admission scheduling gate removed."""
        from kubernetes import client
        core = client.CoreV1Api(self.api)
        pod = core.read_namespaced_pod(pod_name, namespace)
        gates = [g for g in pod.spec.scheduling_gates or [] if g.name == ADMISSION_GATE]
        if not gates:
            raise AssertionError("pod %s/%s has no %s gate" % (namespace, pod_name, ADMISSION_GATE))
        index = (pod.spec.scheduling_gates or []).index(gates[0])
        core.patch_namespaced_pod(pod_name, namespace, [
            {"op": "test", "path": "/spec/schedulingGates/%d/name" % index, "value": ADMISSION_GATE},
            {"op": "remove", "path": "/spec/schedulingGates/%d" % index}])

    def containers(self):
        """This cluster's podman containers: name -> state (running, exited, ...)."""
        out = fake_node.podman("ps", "--all", "--filter", "label=%s=%s" % (fake_node.RUN_LABEL, self.run_id),
                               "--format", "json")
        return {c["Names"][0]: c["State"] for c in json.loads(out.stdout or "[]")}

    def objects(self, namespace):
        """Every object of the kinds gpubox may create in namespace, as "Kind/name" (service-account tokens aside)."""
        from kubernetes import client
        core = client.CoreV1Api(self.api)
        custom = client.CustomObjectsApi(self.api)
        found = []
        for group, plural, kind in ((agent_sandbox.GROUP, "sandboxes", "Sandbox"),
                                    (agent_sandbox.EXTENSIONS_GROUP, "sandboxclaims", "SandboxClaim")):
            try:
                items = custom.list_namespaced_custom_object(group, agent_sandbox.VERSION, namespace, plural)["items"]
            except client.ApiException as e:
                if e.status != 404:  # 404: a cluster started without the CRDs
                    raise
                items = []
            found += ["%s/%s" % (kind, item["metadata"]["name"]) for item in items]
        for secret in core.list_namespaced_secret(namespace).items:
            if secret.type != "kubernetes.io/service-account-token":
                found.append("Secret/" + secret.metadata.name)
        found += ["Pod/" + p.metadata.name for p in core.list_namespaced_pod(namespace).items]
        found += ["PersistentVolumeClaim/" + c.metadata.name
                  for c in core.list_namespaced_persistent_volume_claim(namespace).items]
        return sorted(found)

    def controller_log(self):
        try:
            with open(os.path.join(self.work_dir, "controller.log")) as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def wait(self, what, predicate, timeout=60, interval=0.1):
        """predicate()'s first true value within timeout seconds, else an AssertionError naming what."""
        give_up = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > give_up:
                raise AssertionError("timed out after %d s waiting for %s; the controller's log ends:\n%s" % (
                    timeout, what, "\n".join(self.controller_log().splitlines()[-25:])))
            time.sleep(interval)
