"""The one node of the test cluster, gpubox-test-node (8 nvidia.com/gpu, no
device passed): what the scheduler and the kubelet do for a Pod, with podman.

A Pod with scheduling gates waits (PodScheduled False, SchedulingGated). An
unbound Pod whose PersistentVolumeClaims all exist, asking for at most 8 GPUs,
is bound to the node; otherwise it stays Pending with PodScheduled False,
Unschedulable, saying why. A bound Pod runs its first container as the podman
container gpubox-k8s-test-<run>-<namespace>-<name> (labels gpubox-k8s-test=1
and gpubox-k8s-test.run=<run>): image (never pulled), command as the
entrypoint, args, env (name/value), limits as --cpus/--memory (no swap), the
securityContext (seccomp Unconfined, capabilities, privileged, no privilege
escalation, read-only root, runAsUser/runAsGroup), and volumes as
host directories: secret and configMap data in a fresh 0700 directory (files
0400 unless the volume says a mode; owned by runAsUser where one is set)
mounted read-only, emptyDir a fresh
directory, persistentVolumeClaim one directory per (namespace, claim) that
outlives the Pod (and goes with the claim), hostPath the path itself. Its pod
IP is a loopback address 127.77.X.Y of its own, with every containerPort P
published at IP:P, so the pod IP and port reach the container from the host
as they would in-cluster.
The status is the kubelet's: Running and Ready (once a readiness probe's port
answers, if it has one), then Succeeded or Failed with the exit code when the
container ends (restarted instead under restartPolicy Always, or OnFailure
with a non-zero code). A Pod being deleted has its container removed (after
up to 5 s of SIGTERM, in a thread of its own) and is then deleted for good, as
the kubelet confirms a graceful deletion."""

import base64
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading

from agent_sandbox import find_condition, timestamp

NODE = "gpubox-test-node"
GPUS = 8
LABEL = "gpubox-k8s-test"
RUN_LABEL = "gpubox-k8s-test.run"
IP_LABEL = "gpubox-k8s-test.ip"
POD_LABEL = "gpubox-k8s-test.pod"


def podman(*args, timeout=120):
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout)


def cpus(quantity):
    text = str(quantity)
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


def memory_bytes(quantity):
    text = str(quantity)
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9,
             "T": 10**12}
    for suffix in sorted(units, key=len, reverse=True):
        if text.endswith(suffix):
            return int(float(text[:-len(suffix)]) * units[suffix])
    return int(float(text))


def security_arguments(pod_context, context):
    """podman's flags for a container's securityContext over its Pod's."""
    merged = dict(pod_context, **context)
    args = []
    if (merged.get("seccompProfile") or {}).get("type") == "Unconfined":
        args += ["--security-opt", "seccomp=unconfined"]
    for cap in (context.get("capabilities") or {}).get("add") or []:
        args += ["--cap-add", cap]
    for cap in (context.get("capabilities") or {}).get("drop") or []:
        args += ["--cap-drop", cap]
    if context.get("privileged"):
        args.append("--privileged")
    if context.get("allowPrivilegeEscalation") is False:
        args += ["--security-opt", "no-new-privileges"]
    if context.get("readOnlyRootFilesystem"):
        args.append("--read-only")
    if merged.get("runAsUser") is not None:
        user = str(merged["runAsUser"])
        if merged.get("runAsGroup") is not None:
            user += ":%d" % merged["runAsGroup"]
        args += ["--user", user]
    return args


def qos_class(container):
    """Kubernetes' QoS class of a one-container pod: over cpu and memory only (extended resources do not count)."""
    resources = container.get("resources") or {}
    limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
    if all(k in limits and requests.get(k, limits[k]) == limits[k] for k in ("cpu", "memory")):
        return "Guaranteed"
    if any(k in limits or k in requests for k in ("cpu", "memory")):
        return "Burstable"
    return "BestEffort"


class Container:
    """What the node keeps of one Pod's container."""

    def __init__(self, pod, name, ip, pod_dir):
        self.uid = pod["metadata"]["uid"]
        self.namespace = pod["metadata"]["namespace"]
        self.pod = pod["metadata"]["name"]
        self.name = name
        self.ip = ip
        self.pod_dir = pod_dir
        self.id = ""
        self.started_at = ""
        self.restarts = 0
        self.last_terminated = None


class FakeNode:
    """Runs the Pods of one API server; sync(pods) does one pass over all of them."""

    def __init__(self, core, work_dir, run_id, log):
        self.core = core
        self.work_dir = work_dir
        self.run_id = run_id
        self.log = log
        self.containers = {}  # pod uid -> Container
        self.failed = {}  # pod uid -> why its container could not be made (not retried)
        self.written = {}  # pod uid -> the status this node last wrote, as compared
        self.stopping = set()  # uids of the Pods whose graceful deletion a thread is finishing

    # --- the pass ---

    def sync(self, pods):
        live = {p["metadata"]["uid"]: p for p in pods}
        for uid in [u for u in list(self.containers) if u not in live and u not in self.stopping]:
            self.remove(self.containers[uid], "its Pod is gone")
        for table in (self.failed, self.written):
            for uid in [u for u in table if u not in live]:
                del table[uid]
        states = self.states()
        for pod in pods:
            try:
                self.sync_pod(pod, states)
            except Exception as e:  # one Pod's trouble must not stop the others
                self.log("pod %s/%s: %s" % (pod["metadata"]["namespace"], pod["metadata"]["name"], e))

    def sync_pod(self, pod, states):
        meta, spec, status = pod["metadata"], pod["spec"], pod.get("status") or {}
        ns, name, uid = meta["namespace"], meta["name"], meta["uid"]
        if meta.get("deletionTimestamp"):
            if uid not in self.stopping:
                self.stopping.add(uid)
                grace = min(int(meta.get("deletionGracePeriodSeconds") or 0), 5)
                threading.Thread(target=self.finish_deletion, args=(ns, name, uid, grace), daemon=True).start()
            return
        if status.get("phase") in ("Succeeded", "Failed"):
            return
        if spec.get("schedulingGates"):
            self.write_status(pod, {"phase": "Pending", "conditions": [
                self.cond("PodScheduled", "False", "SchedulingGated",
                          "Scheduling is blocked due to non-empty scheduling gates")]})
            return
        if not spec.get("nodeName"):
            why = self.unschedulable(pod)
            if why:
                self.write_status(pod, {"phase": "Pending", "conditions": [
                    self.cond("PodScheduled", "False", "Unschedulable", "0/1 nodes are available: " + why)]})
                return
            body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": NODE}}
            # The generated client cannot read the Status this returns: take it raw.
            self.core.create_namespaced_pod_binding(name, ns, body, _preload_content=False)
            self.log("pod %s/%s: bound to %s" % (ns, name, NODE))
        if uid in self.failed:
            return
        container = self.containers.get(uid)
        if container is None:
            container = self.start(pod)
            if container is None:
                return
            states = self.states()
        state = states.get(container.name)
        if state is None or state["State"] not in ("running", "created", "configured", "initialized"):
            self.exited(pod, container, state)
            return
        self.running(pod, container)

    # --- scheduling ---

    def unschedulable(self, pod):
        for volume in pod["spec"].get("volumes") or []:
            claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
            if claim and not self.exists(self.core.read_namespaced_persistent_volume_claim, claim,
                                         pod["metadata"]["namespace"]):
                return 'persistentvolumeclaim "%s" not found.' % claim
        gpus = 0
        for c in pod["spec"].get("containers") or []:
            gpus += int((c.get("resources") or {}).get("limits", {}).get("nvidia.com/gpu", 0))
        if gpus > GPUS:
            return "1 Insufficient nvidia.com/gpu."
        return ""

    @staticmethod
    def exists(read, name, namespace):
        try:
            read(name, namespace, _preload_content=False)
            return True
        except Exception as e:
            if getattr(e, "status", None) == 404:
                return False
            raise

    # --- containers ---

    def states(self):
        """podman's view of this run's containers: name -> its `podman ps` entry."""
        out = podman("ps", "--all", "--filter", "label=%s=%s" % (RUN_LABEL, self.run_id), "--format", "json")
        if out.returncode != 0:
            raise RuntimeError("podman ps: " + out.stderr.strip())
        return {c["Names"][0]: c for c in json.loads(out.stdout or "[]")}

    def free_ip(self):
        out = podman("ps", "--all", "--filter", "label=%s=1" % LABEL, "--format", "{{index .Labels \"%s\"}}" % IP_LABEL)
        used = set(out.stdout.split()) | {c.ip for c in list(self.containers.values())}
        for x in range(0, 256):
            for y in range(2, 255):
                ip = "127.77.%d.%d" % (x, y)
                if ip not in used:
                    return ip
        raise RuntimeError("no free 127.77.X.Y address")

    def volume_dirs(self, pod, pod_dir):
        """volume name -> (host path, read-only), or raises LookupError naming what is missing."""
        ns = pod["metadata"]["namespace"]
        dirs = {}
        for volume in pod["spec"].get("volumes") or []:
            vname = volume["name"]
            if "secret" in volume or "configMap" in volume:
                source = volume.get("secret") or volume.get("configMap")
                if "secret" in volume:
                    ref = source["secretName"]
                    read = self.core.read_namespaced_secret
                else:
                    ref = source["name"]
                    read = self.core.read_namespaced_config_map
                try:
                    obj = json.loads(read(ref, ns, _preload_content=False).data)
                except Exception as e:
                    if getattr(e, "status", None) == 404 and not source.get("optional"):
                        raise LookupError('%s "%s" not found' % ("secret" if "secret" in volume else "configmap", ref))
                    if getattr(e, "status", None) != 404:
                        raise
                    obj = {}
                if "secret" in volume:
                    data = {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
                else:
                    data = {k: v.encode() for k, v in (obj.get("data") or {}).items()}
                path = os.path.join(pod_dir, "volumes", vname)
                os.makedirs(path, mode=0o700)
                os.chmod(path, 0o700)
                items = source.get("items") or [{"key": k, "path": k} for k in sorted(data)]
                for item in items:
                    if item["key"] not in data:
                        continue
                    target = os.path.join(path, item["path"])
                    os.makedirs(os.path.dirname(target), exist_ok=True)
                    with open(target, "wb") as f:
                        f.write(data[item["key"]])
                    os.chmod(target, item.get("mode") or source.get("defaultMode") or 0o400)
                # Whoever the container runs as reads them (the kubelet's fsGroup ownership, simplified).
                owner = self.run_as(pod)
                if owner:
                    for where, _, files in os.walk(path):
                        for entry in [where] + [os.path.join(where, f) for f in files]:
                            os.chown(entry, *owner)
                dirs[vname] = (path, True)
            elif "persistentVolumeClaim" in volume:
                claim = volume["persistentVolumeClaim"]["claimName"]
                path = os.path.join(self.work_dir, "pvcs", ns, claim)
                os.makedirs(path, exist_ok=True)
                dirs[vname] = (path, bool(volume["persistentVolumeClaim"].get("readOnly")))
            elif "emptyDir" in volume:
                path = os.path.join(pod_dir, "volumes", vname)
                os.makedirs(path)
                os.chmod(path, 0o777)  # as the kubelet makes it, whatever user the container runs as
                dirs[vname] = (path, False)
            elif "hostPath" in volume:
                dirs[vname] = (volume["hostPath"]["path"], False)
            else:
                self.log("pod %s/%s: volume %s of an unsupported kind, not mounted" % (ns, pod["metadata"]["name"], vname))
        return dirs

    @staticmethod
    def run_as(pod):
        """(uid, gid) the first container runs as when its securityContext says, else None."""
        merged = dict(pod["spec"].get("securityContext") or {}, **(pod["spec"]["containers"][0].get("securityContext") or {}))
        if merged.get("runAsUser") is None:
            return None
        gid = merged.get("fsGroup", merged.get("runAsGroup"))
        return int(merged["runAsUser"]), int(gid) if gid is not None else -1

    def start(self, pod):
        ns, name, uid = pod["metadata"]["namespace"], pod["metadata"]["name"], pod["metadata"]["uid"]
        spec = pod["spec"]
        c = spec["containers"][0]
        if len(spec["containers"]) > 1 or spec.get("initContainers"):
            self.log("pod %s/%s: only the first container runs on this node" % (ns, name))
        if podman("image", "exists", c["image"]).returncode != 0:
            self.fail(pod, "ErrImagePull", 'image "%s" is not on the node (nothing is pulled)' % c["image"])
            return None
        pod_dir = tempfile.mkdtemp(prefix="pod-", dir=self.work_dir)
        try:
            dirs = self.volume_dirs(pod, pod_dir)
        except LookupError as e:
            shutil.rmtree(pod_dir, ignore_errors=True)
            self.write_status(pod, {"phase": "Pending", "conditions": [
                self.cond("PodScheduled", "True", "", "")], "containerStatuses": [self.waiting(
                    c, "ContainerCreating", "MountVolume.SetUp failed: %s" % e)]})
            return None
        container = Container(pod, "%s-%s-%s-%s" % (LABEL, self.run_id, ns, name), self.free_ip(), pod_dir)
        args = ["run", "--detach", "--pull", "never", "--name", container.name, "--hostname", name[:63],
                "--label", "%s=1" % LABEL, "--label", "%s=%s" % (RUN_LABEL, self.run_id),
                "--label", "%s=%s" % (IP_LABEL, container.ip), "--label", "%s=%s/%s" % (POD_LABEL, ns, name)]
        if c.get("command"):
            args += ["--entrypoint", json.dumps(c["command"])]
        if c.get("workingDir"):
            args += ["--workdir", c["workingDir"]]
        for e in c.get("env") or []:
            if "value" in e or "valueFrom" not in e:
                args += ["--env", "%s=%s" % (e["name"], e.get("value", ""))]
        limits = (c.get("resources") or {}).get("limits") or {}
        if "cpu" in limits:
            args.append("--cpus=%g" % cpus(limits["cpu"]))
        if "memory" in limits:  # no swap, as on a node
            args += ["--memory=%d" % memory_bytes(limits["memory"]), "--memory-swap=%d" % memory_bytes(limits["memory"])]
        args += security_arguments(spec.get("securityContext") or {}, c.get("securityContext") or {})
        for p in c.get("ports") or []:
            args += ["--publish", "%s:%d:%d/%s" % (container.ip, p["containerPort"], p["containerPort"],
                                                   (p.get("protocol") or "TCP").lower())]
        for m in c.get("volumeMounts") or []:
            if m["name"] not in dirs:
                continue
            path, read_only = dirs[m["name"]]
            if m.get("subPath"):
                path = os.path.join(path, m["subPath"])
            args += ["--volume", "%s:%s%s" % (path, m["mountPath"], ":ro" if read_only or m.get("readOnly") else "")]
        args.append(c["image"])
        args += c.get("args") or []
        out = podman(*args)
        if out.returncode != 0:
            shutil.rmtree(pod_dir, ignore_errors=True)
            podman("rm", "--force", "--time", "0", container.name)
            self.fail(pod, "CreateContainerError", out.stderr.strip()[-500:])
            return None
        container.id = out.stdout.strip()
        container.started_at = timestamp()
        self.containers[uid] = container
        self.log("pod %s/%s: container %s started at %s" % (ns, name, container.name, container.ip))
        return container

    def finish_deletion(self, ns, name, uid, grace):
        """A graceful deletion, beside the passes: the container stopped (SIGTERM, then SIGKILL after
        grace seconds), then the Pod deleted for good."""
        try:
            container = self.containers.get(uid)
            if container is not None:
                self.remove(container, "its Pod is being deleted", grace)
            try:
                self.core.delete_namespaced_pod(name, ns, grace_period_seconds=0)
                self.log("pod %s/%s: deleted (graceful deletion confirmed)" % (ns, name))
            except Exception as e:
                if getattr(e, "status", None) != 404:
                    self.log("pod %s/%s: could not confirm its deletion: %s" % (ns, name, e))
        finally:
            self.stopping.discard(uid)

    def remove(self, container, why, grace=0):
        podman("rm", "--force", "--time", str(grace), container.name, timeout=grace + 60)
        shutil.rmtree(container.pod_dir, ignore_errors=True)
        self.containers.pop(container.uid, None)  # dict operations are atomic: no lock beside the threads
        self.log("pod %s/%s: container %s removed (%s)" % (container.namespace, container.pod, container.name, why))

    def prune_volumes(self, claims):
        """Deletes the data of a PersistentVolumeClaim that is gone (a dynamically provisioned volume's
        reclaim policy, Delete); claims: its (namespace, name) pairs."""
        root = os.path.join(self.work_dir, "pvcs")
        for ns in os.listdir(root) if os.path.isdir(root) else []:
            for name in os.listdir(os.path.join(root, ns)):
                if (ns, name) not in claims:
                    shutil.rmtree(os.path.join(root, ns, name), ignore_errors=True)
                    self.log("volume of persistentvolumeclaim %s/%s deleted (the claim is gone)" % (ns, name))

    def remove_all(self):
        for container in list(self.containers.values()):
            self.remove(container, "the controller is stopping")
        # Any left from a pass cut short.
        out = podman("ps", "--all", "--quiet", "--filter", "label=%s=%s" % (RUN_LABEL, self.run_id))
        for cid in out.stdout.split():
            podman("rm", "--force", "--time", "0", cid)

    # --- status ---

    @staticmethod
    def cond(type_, status, reason, message):
        c = {"type": type_, "status": status, "lastTransitionTime": timestamp(), "lastProbeTime": None}
        if reason:
            c["reason"] = reason
        if message:
            c["message"] = message
        return c

    @staticmethod
    def waiting(c, reason, message):
        return {"name": c["name"], "image": c["image"], "imageID": "", "ready": False, "restartCount": 0,
                "started": False, "state": {"waiting": {"reason": reason, "message": message}}}

    def fail(self, pod, reason, message):
        self.failed[pod["metadata"]["uid"]] = message
        self.log("pod %s/%s: %s: %s" % (pod["metadata"]["namespace"], pod["metadata"]["name"], reason, message))
        self.write_status(pod, {"phase": "Pending", "conditions": [self.cond("PodScheduled", "True", "", "")],
                                "containerStatuses": [self.waiting(pod["spec"]["containers"][0], reason, message)]})

    def write_status(self, pod, status):
        """Patches the Pod's status when it differs from what this node last wrote for it (times aside)."""
        def strip(value):
            if isinstance(value, dict):
                return {k: strip(v) for k, v in value.items() if k not in ("lastTransitionTime", "finishedAt")}
            if isinstance(value, list):
                return [strip(v) for v in value]
            return value

        key = json.dumps(strip(status), sort_keys=True)
        uid = pod["metadata"]["uid"]
        if self.written.get(uid) == key:
            return
        old = pod.get("status") or {}
        # Keep the transition time of a condition whose status did not change.
        for c in status.get("conditions") or []:
            before = find_condition(old.get("conditions"), c["type"])
            if before and before.get("status") == c["status"] and before.get("lastTransitionTime"):
                c["lastTransitionTime"] = before["lastTransitionTime"]
        self.core.patch_namespaced_pod_status(pod["metadata"]["name"], pod["metadata"]["namespace"], {"status": status})
        self.written[uid] = key
        ready = find_condition(status.get("conditions"), "Ready")
        self.log("pod %s/%s: status %s%s" % (pod["metadata"]["namespace"], pod["metadata"]["name"], status.get("phase"),
                                             ", ready" if ready and ready["status"] == "True" else ""))

    def probe_ready(self, pod, container):
        probe = pod["spec"]["containers"][0].get("readinessProbe") or {}
        port = (probe.get("tcpSocket") or probe.get("httpGet") or {}).get("port")
        if port is None:
            return True
        if isinstance(port, str):  # a named containerPort
            port = next((p["containerPort"] for p in pod["spec"]["containers"][0].get("ports") or []
                         if p.get("name") == port), None)
            if port is None:
                return False
        try:
            socket.create_connection((container.ip, int(port)), timeout=0.3).close()
            return True
        except OSError:
            return False

    def base_status(self, pod, container, phase, ready, reason=""):
        c = pod["spec"]["containers"][0]
        conds = [self.cond("PodReadyToStartContainers", "True", "", ""), self.cond("Initialized", "True", "", ""),
                 self.cond("Ready", "True" if ready else "False", reason if not ready else "", ""),
                 self.cond("ContainersReady", "True" if ready else "False", reason if not ready else "", ""),
                 self.cond("PodScheduled", "True", "", "")]
        status = {"phase": phase, "conditions": conds, "hostIP": "127.0.0.1", "hostIPs": [{"ip": "127.0.0.1"}],
                  "podIP": container.ip, "podIPs": [{"ip": container.ip}],
                  "startTime": (pod.get("status") or {}).get("startTime") or container.started_at,
                  # The API server sets it when the Pod is made and never lets it change.
                  "qosClass": (pod.get("status") or {}).get("qosClass") or qos_class(c)}
        cs = {"name": c["name"], "image": c["image"], "imageID": c["image"], "containerID": "podman://" + container.id,
              "ready": ready, "restartCount": container.restarts, "started": phase == "Running"}
        if container.last_terminated:
            cs["lastState"] = {"terminated": container.last_terminated}
        status["containerStatuses"] = [cs]
        return status, cs

    def running(self, pod, container):
        ready = self.probe_ready(pod, container)
        status, cs = self.base_status(pod, container, "Running", ready, "ContainersNotReady")
        cs["state"] = {"running": {"startedAt": container.started_at}}
        self.write_status(pod, status)

    def exited(self, pod, container, state):
        code, oom = 137, False
        if state is not None:
            code = int(state.get("ExitCode") or 0)
            out = podman("inspect", "--format", "{{.State.OOMKilled}}", container.name)
            oom = out.stdout.strip() == "true"
        terminated = {"exitCode": code, "reason": "OOMKilled" if oom else ("Completed" if code == 0 else "Error"),
                      "startedAt": container.started_at, "finishedAt": timestamp(),
                      "containerID": "podman://" + container.id}
        policy = pod["spec"].get("restartPolicy") or "Always"
        if state is not None and (policy == "Always" or (policy == "OnFailure" and code != 0)):
            container.restarts += 1
            container.last_terminated = terminated
            podman("start", container.name)
            container.started_at = timestamp()
            self.log("pod %s/%s: container exited %d, restarted (restartPolicy %s)" % (
                container.namespace, container.pod, code, policy))
            return
        phase = "Succeeded" if code == 0 else "Failed"
        status, cs = self.base_status(pod, container, phase, False, "PodCompleted" if code == 0 else "PodFailed")
        cs["state"] = {"terminated": terminated}
        self.write_status(pod, status)
        self.log("pod %s/%s: container exited %d" % (container.namespace, container.pod, code))
