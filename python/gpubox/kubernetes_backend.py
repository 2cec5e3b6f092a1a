"""gpubox's Kubernetes backend: sandboxes on a cluster running agent-sandbox
(kubernetes-sigs/agent-sandbox), through the official `kubernetes` client.

    python -m gpubox.kubernetes_backend create|terminate|info|ls|adopt < REQUEST.json
    python -m gpubox.kubernetes_backend warm-pool NAME [--replicas N] [--gpu N] [--image REF]
                                                  [--namespace NS] [--queue Q] [--cpu C] [--memory MIB]

The first form reads one JSON request on stdin (never argv: a create's request
holds the agent's CURVE secret key) and prints one JSON object: the result, or
{"error": {"code", "message"}} with exit status 2 (usage: no `kubernetes`
package, no kubeconfig, a namespace that does not exist, agent-sandbox not
installed, a bad request; nothing was created) or 1 (the cluster or the
sandbox failed; what was created is deleted again). The `gpubox` CLI runs it
for create, terminate, state, ls --remote and adopt of --backend kubernetes;
everything else goes through the agent's RPC port, as for every backend.

What a create makes, in the namespace asked for (docs/kubernetes.md):
  - a Secret gpubox-ID holding config.json, the agent's whole config (its
    CURVE secret key, the client's public key, secrets), mounted read-only as
    a file at /run/gpubox-config (never an env var), owned by the Sandbox so
    that a cluster's garbage collector removes it too; terminate deletes it;
  - a Sandbox gpubox-ID (agents.x-k8s.io/v1beta1) of the gpubox image, the
    agent as PID 1 (the image's ENTRYPOINT) reading that file, --gpu N as
    nvidia.com/gpu limits, cpu and memory limits, the Kueue queue label,
    PersistentVolumeClaims mounted by name, shutdownTime from --timeout;
  - or, with a warm pool, a SandboxClaim gpubox-ID of a pool that
    `warm-pool` described: its pods already run the agent with the pool's
    keys (the pool's Secret gpubox-pool-NAME, which the client reads).
The host reaches the agent at the pod's IP, port 7000, with CURVE: from
inside the cluster or a network that routes pod IPs. One thread.
"""

import base64
import datetime
import json
import os
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

from .control_plane import BackendError, await_agent, run_command, usage_error

AGENT_PORT = 7000
CONFIG_DIR = "/run/gpubox-config"
DEFAULT_IMAGE = "gpubox:latest"
MANAGED_BY = "app.kubernetes.io/managed-by"
ID_LABEL = "gpubox.dev/sandbox"      # the gpubox id of what gpubox created
POOL_LABEL = "gpubox.dev/warm-pool"  # a pool's template, warm pool and Secret
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
SANDBOXES = ("agents.x-k8s.io", "v1beta1", "sandboxes")
CLAIMS = ("extensions.agents.x-k8s.io", "v1beta1", "sandboxclaims")
TEMPLATES = ("extensions.agents.x-k8s.io", "v1beta1", "sandboxtemplates")
POOLS = ("extensions.agents.x-k8s.io", "v1beta1", "sandboxwarmpools")
AGENT_SANDBOX_VERSION = "v1.0.1"
INSTALL_HINT = ("install agent-sandbox %s with its extensions: kubectl apply -f "
                "https://github.com/kubernetes-sigs/agent-sandbox/releases/download/%s/manifest.yaml -f "
                "https://github.com/kubernetes-sigs/agent-sandbox/releases/download/%s/extensions.yaml (docs/kubernetes.md)"
                % (AGENT_SANDBOX_VERSION, AGENT_SANDBOX_VERSION, AGENT_SANDBOX_VERSION))
CLIENT_HINT = "pip install 'kubernetes>=37' (or pip install 'gpubox[kubernetes]')"


def _client():
    try:
        import kubernetes
    except ImportError:
        usage_error("the Kubernetes backend needs the official kubernetes client, which is not installed for %s: %s"
                    % (sys.executable, CLIENT_HINT))
    return kubernetes


class Cluster:
    """One kubeconfig context's API: the clients and the namespace a request names."""

    def __init__(self, request: Dict[str, Any]):
        k8s = _client()
        self.k8s = k8s
        self.context = request.get("context") or None
        self.namespace = request.get("namespace") or "default"
        try:
            self.api = k8s.config.new_client_from_config(context=self.context)
        except k8s.config.ConfigException as e:
            if self.context is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
                k8s.config.load_incluster_config()
                self.api = k8s.client.ApiClient()
            else:
                where = os.environ.get("KUBECONFIG") or "~/.kube/config"
                usage_error("no usable kubeconfig (%s: %s): set KUBECONFIG, or pass --context with a context it has"
                            % (where, str(e).strip()))
        self.core = k8s.client.CoreV1Api(self.api)
        self.custom = k8s.client.CustomObjectsApi(self.api)

    def is_missing(self, error: Exception) -> bool:
        return isinstance(error, self.k8s.client.ApiException) and error.status == 404

    def check_namespace(self) -> None:
        try:
            self.core.read_namespace(self.namespace)
        except self.k8s.client.ApiException as e:
            if e.status == 404:
                usage_error("--namespace: namespace '%s' does not exist in the cluster of context %s (kubectl create namespace %s)"
                            % (self.namespace, self.context or "(current)", self.namespace))
            raise

    def check_crds(self, *kinds) -> None:
        """BackendError naming how to install agent-sandbox when the cluster does not serve these kinds."""
        for group, version, plural in kinds:
            try:
                self.custom.list_namespaced_custom_object(group, version, self.namespace, plural, limit=1)
            except self.k8s.client.ApiException as e:
                if e.status == 404:
                    usage_error("the cluster does not serve %s.%s/%s: agent-sandbox is not installed; %s"
                                % (plural, group, version, INSTALL_HINT))
                raise

    def get(self, kind, name: str) -> Optional[Dict[str, Any]]:
        try:
            return self.custom.get_namespaced_custom_object(kind[0], kind[1], self.namespace, kind[2], name)
        except Exception as e:
            if self.is_missing(e):
                return None
            raise

    def delete(self, kind, name: str) -> None:
        try:
            self.custom.delete_namespaced_custom_object(kind[0], kind[1], self.namespace, kind[2], name)
        except Exception as e:
            if not self.is_missing(e):
                raise

    def delete_secret(self, name: str) -> None:
        try:
            self.core.delete_namespaced_secret(name, self.namespace)
        except Exception as e:
            if not self.is_missing(e):
                raise

    def secret_data(self, name: str) -> Optional[Dict[str, str]]:
        try:
            secret = self.core.read_namespaced_secret(name, self.namespace)
        except Exception as e:
            if self.is_missing(e):
                return None
            raise
        return {k: base64.b64decode(v).decode() for k, v in (secret.data or {}).items()}


def _rfc3339(seconds_from_now: float) -> str:
    at = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=seconds_from_now)
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def _resources(request: Dict[str, Any]) -> Dict[str, Any]:
    limits: Dict[str, Any] = {}
    if int(request.get("gpu") or 0) > 0:
        limits["nvidia.com/gpu"] = str(int(request["gpu"]))
    if request.get("cpu"):
        limits["cpu"] = "%g" % float(request["cpu"])
    if request.get("memory_mib"):
        limits["memory"] = "%dMi" % int(request["memory_mib"])
    return {"limits": limits} if limits else {}


def pod_template(image: str, secret: str, labels: Dict[str, str], request: Dict[str, Any]) -> Dict[str, Any]:
    """The pod of a gpubox sandbox: the agent (the image's ENTRYPOINT) reading its config from the Secret's file."""
    mounts = [{"name": "gpubox-config", "mountPath": CONFIG_DIR, "readOnly": True}]
    # config.json only: a pool's Secret also holds the clients' keys, which its pods must not see.
    volumes: List[Dict[str, Any]] = [{"name": "gpubox-config", "secret": {
        "secretName": secret, "defaultMode": 0o400, "items": [{"key": "config.json", "path": "config.json"}]}}]
    for i, volume in enumerate(request.get("volumes") or []):
        mounts.append({"name": "volume-%d" % i, "mountPath": volume["path"]})
        volumes.append({"name": "volume-%d" % i, "persistentVolumeClaim": {"claimName": volume["claim"]}})
    container = {"name": "agent", "image": image, "args": ["--config", CONFIG_DIR + "/config.json"],
                 "ports": [{"name": "gpubox-rpc", "containerPort": AGENT_PORT, "protocol": "TCP"}],
                 "volumeMounts": mounts}
    resources = _resources(request)
    if resources:
        container["resources"] = resources
    return {"metadata": {"labels": labels},
            "spec": {"containers": [container], "volumes": volumes, "restartPolicy": "Never",
                     "automountServiceAccountToken": False, "enableServiceLinks": False}}


def _labels(gpubox_id: str, request: Dict[str, Any]) -> Dict[str, str]:
    labels = {MANAGED_BY: "gpubox", ID_LABEL: gpubox_id}
    if request.get("queue"):
        labels[QUEUE_LABEL] = request["queue"]
    return labels


def _ready(obj: Optional[Dict[str, Any]]) -> Tuple[bool, str]:
    """(Ready, the Ready condition's reason and message) of a Sandbox or SandboxClaim."""
    for condition in ((obj or {}).get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            why = " ".join(x for x in (condition.get("reason"), condition.get("message")) if x)
            return condition.get("status") == "True", why
    return False, "no Ready condition yet"


def _pod_ips(obj: Dict[str, Any], claim: bool) -> List[str]:
    status = obj.get("status") or {}
    return list(((status.get("sandbox") or {}) if claim else status).get("podIPs") or [])


def _endpoint(pod_ip: str) -> str:
    return "tcp://%s:%d" % ("[%s]" % pod_ip if ":" in pod_ip else pod_ip, AGENT_PORT)


def _pod_note(cluster: Cluster, name: str) -> str:
    """What the sandbox's pod says of itself: its phase, gates and the reason it waits."""
    try:
        pod = cluster.core.read_namespaced_pod(name, cluster.namespace)
    except Exception:
        return "no pod yet"
    parts = ["pod phase " + (pod.status.phase or "unknown") if pod.status else "pod has no status"]
    if pod.spec and pod.spec.scheduling_gates:
        parts.append("scheduling gates " + ", ".join(g.name for g in pod.spec.scheduling_gates)
                     + " (waiting for Kueue to admit it)")
    for condition in (pod.status.conditions or []) if pod.status else []:
        if condition.status != "True" and condition.message:
            parts.append("%s: %s" % (condition.type, condition.message))
    return "; ".join(parts)


def _await_ready(cluster: Cluster, kind, name: str, timeout_s: float) -> Dict[str, Any]:
    """The object once Ready with a pod IP; BackendError saying why not when the time is up."""
    give_up = time.monotonic() + timeout_s
    claim = kind == CLAIMS
    while True:
        obj = cluster.get(kind, name)
        if obj is None:
            raise BackendError("failed", "%s %s/%s was deleted while gpubox waited for it to be Ready"
                               % ("SandboxClaim" if claim else "Sandbox", cluster.namespace, name))
        ready, why = _ready(obj)
        if ready and _pod_ips(obj, claim):
            return obj
        if time.monotonic() > give_up:
            pod = (((obj.get("status") or {}).get("sandbox") or {}).get("name") if claim else name) or ""
            note = _pod_note(cluster, pod) if pod else "no sandbox assigned from the warm pool yet"
            raise BackendError("failed", "%s %s/%s was not Ready within %g s (--ready-timeout): %s; %s"
                               % ("SandboxClaim" if claim else "Sandbox", cluster.namespace, name, timeout_s, why, note))
        time.sleep(0.2)


def _check_create(request: Dict[str, Any]) -> None:
    if not request.get("gpubox_id"):
        usage_error("gpubox_id: required")
    if not request.get("warm_pool") and (not request.get("server_public_key")
                                         or not (request.get("client_keys") or {}).get("public_key")):
        usage_error("server_public_key and client_keys: the CURVE keys the host connects with are required")
    for volume in request.get("volumes") or []:
        if not isinstance(volume, dict) or not volume.get("claim") or not str(volume.get("path", "")).startswith("/"):
            usage_error("volumes: expected [{claim, path}], got %r" % (volume,))


def _check_volumes(cluster: Cluster, request: Dict[str, Any]) -> None:
    for volume in request.get("volumes") or []:
        try:
            cluster.core.read_namespaced_persistent_volume_claim(volume["claim"], cluster.namespace)
        except Exception as e:
            if cluster.is_missing(e):
                usage_error("--volume: PersistentVolumeClaim '%s' does not exist in namespace %s"
                            % (volume["claim"], cluster.namespace))
            raise


def create(request: Dict[str, Any]) -> Dict[str, Any]:
    """Starts a sandbox (a Sandbox of gpubox's template, or a claim on a warm pool) and waits until its
    agent answers; on any failure deletes what it created."""
    _check_create(request)
    cluster = Cluster(request)
    cluster.check_namespace()
    pool = request.get("warm_pool") or ""
    cluster.check_crds(CLAIMS if pool else SANDBOXES)
    _check_volumes(cluster, request)
    name = "gpubox-" + request["gpubox_id"]
    ready_timeout = float(request.get("ready_timeout_s", 300))
    started = time.monotonic()
    created: List[Tuple[str, Any]] = []
    try:
        if pool:
            keys = pool_keys(cluster, pool)
            server_key, client_keys = keys["server_key"], keys["client_keys"]
            created.append(("claim", name))
            obj = _create_claim(cluster, name, pool, request)
        else:
            server_key, client_keys = request["server_public_key"], request["client_keys"]
            created.append(("secret", name))
            secret = _create_secret(cluster, name, request)
            created.append(("sandbox", name))
            obj = _create_sandbox(cluster, name, request)
            _own(cluster, secret, obj)
        obj = _await_ready(cluster, CLAIMS if pool else SANDBOXES, name, ready_timeout)
        pod_ip = _pod_ips(obj, bool(pool))[0]
        endpoint = _endpoint(pod_ip)
        await_agent(endpoint, server_key, client_keys, max(ready_timeout - (time.monotonic() - started), 5.0))
    except BaseException:
        _delete_created(cluster, created)
        raise
    result = {"kubernetes_id": name, "kind": "SandboxClaim" if pool else "Sandbox", "namespace": cluster.namespace,
              "context": cluster.context or "", "endpoint": endpoint, "pod_ip": pod_ip,
              "ready_s": round(time.monotonic() - started, 3), "secret": "" if pool else name}
    if pool:
        result.update(warm_pool=pool, sandbox=((obj.get("status") or {}).get("sandbox") or {}).get("name", ""),
                      server_key=server_key, client_keys=client_keys)
    return result


def _create_secret(cluster: Cluster, name: str, request: Dict[str, Any]):
    body = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "labels": _labels(request["gpubox_id"], {})},
            "stringData": {"config.json": json.dumps(request.get("agent_config") or {})}}
    return cluster.core.create_namespaced_secret(cluster.namespace, body)


def _create_sandbox(cluster: Cluster, name: str, request: Dict[str, Any]) -> Dict[str, Any]:
    labels = _labels(request["gpubox_id"], request)
    spec: Dict[str, Any] = {"podTemplate": pod_template(request.get("image") or DEFAULT_IMAGE, name, labels, request)}
    if request.get("timeout_s"):
        spec["shutdownTime"] = _rfc3339(float(request["timeout_s"]))
        spec["shutdownPolicy"] = "Delete"
    body = {"apiVersion": "%s/%s" % SANDBOXES[:2], "kind": "Sandbox",
            "metadata": {"name": name, "labels": labels, "annotations": {"gpubox.dev/name": request.get("name") or ""}},
            "spec": spec}
    return cluster.custom.create_namespaced_custom_object(*SANDBOXES[:2], cluster.namespace, SANDBOXES[2], body)


def _create_claim(cluster: Cluster, name: str, pool: str, request: Dict[str, Any]) -> Dict[str, Any]:
    labels = _labels(request["gpubox_id"], {})
    spec: Dict[str, Any] = {"warmPoolRef": {"name": pool}}
    if request.get("timeout_s"):
        spec["lifecycle"] = {"shutdownTime": _rfc3339(float(request["timeout_s"])), "shutdownPolicy": "Delete"}
    body = {"apiVersion": "%s/%s" % CLAIMS[:2], "kind": "SandboxClaim",
            "metadata": {"name": name, "labels": labels, "annotations": {"gpubox.dev/name": request.get("name") or ""}},
            "spec": spec}
    return cluster.custom.create_namespaced_custom_object(*CLAIMS[:2], cluster.namespace, CLAIMS[2], body)


def _own(cluster: Cluster, secret, sandbox: Dict[str, Any]) -> None:
    """Makes the Sandbox the Secret's owner, so that a cluster's garbage collector deletes the Secret with it."""
    meta = sandbox["metadata"]
    owner = {"apiVersion": sandbox["apiVersion"], "kind": "Sandbox", "name": meta["name"], "uid": meta["uid"],
             "blockOwnerDeletion": False}
    cluster.core.patch_namespaced_secret(secret.metadata.name, cluster.namespace,
                                         {"metadata": {"ownerReferences": [owner]}})


def _delete_created(cluster: Cluster, created: List[Tuple[str, Any]]) -> None:
    for what, name in reversed(created):
        try:
            if what == "secret":
                cluster.delete_secret(name)
            else:
                cluster.delete(CLAIMS if what == "claim" else SANDBOXES, name)
        except Exception:
            pass


def pool_keys(cluster: Cluster, pool: str) -> Dict[str, Any]:
    """The pool's client key pair and agent key, from its Secret gpubox-pool-NAME."""
    if cluster.get(POOLS, pool) is None:
        usage_error("--warm-pool: no SandboxWarmPool '%s' in namespace %s (python3 -m gpubox.kubernetes_backend warm-pool %s "
                    "--namespace %s | kubectl apply -f -)" % (pool, cluster.namespace, pool, cluster.namespace))
    data = cluster.secret_data("gpubox-pool-" + pool)
    if not data or "client_keys.json" not in data:
        usage_error("--warm-pool: the pool '%s' has no Secret gpubox-pool-%s with client_keys.json: it was not made by "
                    "`python3 -m gpubox.kubernetes_backend warm-pool`" % (pool, pool))
    keys = json.loads(data["client_keys.json"])
    return {"server_key": keys["server_key"],
            "client_keys": {"public_key": keys["public_key"], "secret_key": keys["secret_key"]}}


def _object_of(cluster: Cluster, request: Dict[str, Any]):
    name = request.get("kubernetes_id")
    if not isinstance(name, str) or not name:
        usage_error("kubernetes_id: expected the name of a Sandbox or SandboxClaim gpubox created")
    kind = CLAIMS if request.get("kind") == "SandboxClaim" else SANDBOXES
    return kind, name


def terminate(request: Dict[str, Any]) -> Dict[str, Any]:
    """Deletes the Sandbox (or claim) and the sandbox's Secret, and waits until both are gone. The CLI
    has asked the agent to shut down first: with wait_s, waits that long for the pod to end by itself."""
    cluster = Cluster(request)
    kind, name = _object_of(cluster, request)
    give_up = time.monotonic() + float(request.get("wait_s", 0))
    ended = _ended(cluster, kind, name)
    while ended is None and time.monotonic() < give_up:
        time.sleep(0.25)
        ended = _ended(cluster, kind, name)
    obj = cluster.get(kind, name)
    pod = _pod_name(kind, obj) if obj else ""
    cluster.delete(kind, name)
    if request.get("secret"):
        cluster.delete_secret(request["secret"])
    # Gone means its pod too (the garbage collector deletes it after the Sandbox), so that its GPUs are free.
    gone_by = time.monotonic() + 60
    while (cluster.get(kind, name) is not None or (pod and _pod_exists(cluster, pod))) and time.monotonic() < gone_by:
        time.sleep(0.2)
    return {"kubernetes_id": name, "terminated": ended is None, "ended": ended}


def _pod_exists(cluster: Cluster, name: str) -> bool:
    try:
        cluster.core.read_namespaced_pod(name, cluster.namespace)
        return True
    except Exception as e:
        if cluster.is_missing(e):
            return False
        raise


def _pod_name(kind, obj: Dict[str, Any]) -> str:
    """The pod of a Sandbox (its name), or of a claim's sandbox ("" before one is assigned)."""
    if kind == CLAIMS:
        return ((obj.get("status") or {}).get("sandbox") or {}).get("name") or ""
    return obj["metadata"]["name"]


def _ended(cluster: Cluster, kind, name: str) -> Optional[Dict[str, Any]]:
    """None while the sandbox runs; else {exit_code, reason}."""
    obj = cluster.get(kind, name)
    if obj is None:
        return {"exit_code": None, "reason": "%s %s/%s no longer exists" % (
            "SandboxClaim" if kind == CLAIMS else "Sandbox", cluster.namespace, name)}
    pod_name = _pod_name(kind, obj)
    if not pod_name:
        return None
    try:
        pod = cluster.core.read_namespaced_pod(pod_name, cluster.namespace)
    except Exception as e:
        if cluster.is_missing(e):
            ready, _ = _ready(obj)
            return None if ready else {"exit_code": None, "reason": "its pod %s is gone" % pod_name}
        raise
    if pod.status and pod.status.phase in ("Succeeded", "Failed"):
        code = None
        for status in pod.status.container_statuses or []:
            if status.state and status.state.terminated:
                code = status.state.terminated.exit_code
        return {"exit_code": code, "reason": "its pod %s %s" % (pod_name, pod.status.phase.lower())}
    return None


def info(request: Dict[str, Any]) -> Dict[str, Any]:
    """The cluster's view of sandboxes ([{kubernetes_id, kind}] in one namespace and context): running, or dead."""
    cluster = Cluster(request)
    states = {}
    for entry in request.get("sandboxes") or []:
        kind, name = _object_of(cluster, entry)
        ended = _ended(cluster, kind, name)
        states[name] = {"state": "dead" if ended else "running", "ended": ended}
    return {"sandboxes": states}


def adopt(request: Dict[str, Any]) -> Dict[str, Any]:
    """A running sandbox gpubox created elsewhere (or before the store was lost): its endpoint, checked with the keys."""
    cluster = Cluster(request)
    name = request.get("kubernetes_id") or ""
    # A claim first: one that found no warm member has a Sandbox of its own name (not labelled gpubox's).
    kind, obj = CLAIMS, cluster.get(CLAIMS, name)
    if obj is None:
        kind, obj = SANDBOXES, cluster.get(SANDBOXES, name)
    if obj is None or (obj["metadata"].get("labels") or {}).get(MANAGED_BY) != "gpubox":
        usage_error("no Sandbox or SandboxClaim '%s' that gpubox created in namespace %s" % (name, cluster.namespace))
    ready, why = _ready(obj)
    ips = _pod_ips(obj, kind == CLAIMS)
    if not ready or not ips:
        usage_error("%s/%s is not Ready (%s)" % (cluster.namespace, name, why))
    endpoint = _endpoint(ips[0])
    await_agent(endpoint, request.get("server_public_key") or "", request.get("client_keys") or {},
                 float(request.get("ready_timeout_s", 30)))
    labels = obj["metadata"].get("labels") or {}
    is_pool = kind == CLAIMS
    return {"kubernetes_id": name, "kind": "SandboxClaim" if is_pool else "Sandbox", "namespace": cluster.namespace,
            "context": cluster.context or "", "endpoint": endpoint, "pod_ip": ips[0],
            "secret": "" if is_pool else name, "gpubox_id": labels.get(ID_LABEL, ""), "tags": labels}


def ls(request: Dict[str, Any]) -> Dict[str, Any]:
    """The namespace's Sandboxes and SandboxClaims that gpubox created (by its label)."""
    cluster = Cluster(request)
    cluster.check_namespace()
    found = []
    for kind in (SANDBOXES, CLAIMS):
        try:
            listed = cluster.custom.list_namespaced_custom_object(
                kind[0], kind[1], cluster.namespace, kind[2], label_selector="%s=gpubox" % MANAGED_BY)
        except Exception as e:
            if cluster.is_missing(e):
                continue
            raise
        for obj in listed.get("items") or []:
            labels = obj["metadata"].get("labels") or {}
            found.append({"kubernetes_id": obj["metadata"]["name"], "gpubox_id": labels.get(ID_LABEL, ""),
                          "kind": "SandboxClaim" if kind == CLAIMS else "Sandbox", "tags": labels})
    return {"namespace": cluster.namespace, "sandboxes": found}


def warm_pool_manifests(name: str, replicas: int = 1, gpu: int = 0, image: str = DEFAULT_IMAGE,
                        namespace: str = "default", queue: str = "", cpu: float = 0, memory_mib: int = 0) -> Dict[str, Any]:
    """A warm pool of the gpubox image as a List of objects to apply: the pool's Secret (a fresh CURVE key
    pair for the agents and one for the clients; the agents' config), a SandboxTemplate and a SandboxWarmPool."""
    import zmq
    server_public, server_secret = zmq.curve_keypair()
    client_public, client_secret = zmq.curve_keypair()
    secret = "gpubox-pool-" + name
    config = {"rpc": {"endpoints": ["tcp://0.0.0.0:%d" % AGENT_PORT], "secret_key": server_secret.decode(),
                      "authorized_keys": [client_public.decode()]}}
    keys = {"public_key": client_public.decode(), "secret_key": client_secret.decode(), "server_key": server_public.decode()}
    labels = {MANAGED_BY: "gpubox", POOL_LABEL: name}
    request = {"gpu": gpu, "cpu": cpu, "memory_mib": memory_mib}
    pod_labels = dict(labels, **({QUEUE_LABEL: queue} if queue else {}))
    meta = lambda n: {"name": n, "namespace": namespace, "labels": labels}  # noqa: E731
    return {"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": meta(secret),
         "stringData": {"config.json": json.dumps(config), "client_keys.json": json.dumps(keys)}},
        # Unmanaged: agent-sandbox's own NetworkPolicy would let in only its router, not gpubox's host.
        {"apiVersion": "%s/%s" % TEMPLATES[:2], "kind": "SandboxTemplate", "metadata": meta(name),
         "spec": {"podTemplate": pod_template(image, secret, pod_labels, request), "networkPolicyManagement": "Unmanaged"}},
        {"apiVersion": "%s/%s" % POOLS[:2], "kind": "SandboxWarmPool", "metadata": meta(name),
         "spec": {"replicas": replicas, "sandboxTemplateRef": {"name": name}}},
    ]}


def warm_pool_command(argv: List[str]) -> int:
    import argparse
    parser = argparse.ArgumentParser(prog="python3 -m gpubox.kubernetes_backend warm-pool",
                                     description="Prints a warm pool of the gpubox image as objects for kubectl apply -f -.")
    parser.add_argument("name")
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--image", default=DEFAULT_IMAGE)
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--queue", default="")
    parser.add_argument("--cpu", type=float, default=0)
    parser.add_argument("--memory", type=int, default=0, help="MiB")
    args = parser.parse_args(argv)
    if args.replicas < 0 or args.gpu < 0:
        parser.error("--replicas and --gpu must be 0 or more")
    print(json.dumps(warm_pool_manifests(args.name, args.replicas, args.gpu, args.image, args.namespace, args.queue,
                                         args.cpu, args.memory), indent=2))
    return 0


COMMANDS = {"create": create, "terminate": terminate, "info": info, "ls": ls, "adopt": adopt}


def main(argv: List[str]) -> int:
    if argv and argv[0] == "warm-pool":
        return warm_pool_command(argv[1:])
    return run_command("gpubox.kubernetes_backend", COMMANDS, argv, lambda e: "Kubernetes: " + _describe(e))


def _describe(error: Exception) -> str:
    """An ApiException as its status and the API server's message; others as type: text."""
    status, reason, body = getattr(error, "status", None), getattr(error, "reason", None), getattr(error, "body", None)
    if status is not None and body:
        try:
            return "%s %s: %s" % (status, reason, json.loads(body).get("message", body))
        except ValueError:
            return "%s %s: %s" % (status, reason, body)
    return "%s: %s" % (type(error).__name__, error)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
