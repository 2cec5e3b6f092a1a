"""The test cluster's stand-in for the agent-sandbox controller (v1.0.1), the
garbage collector, Kueue's pod webhook and the node (fake_node.py), in one
process over the official kubernetes client, for all namespaces.

    python controller.py --kubeconfig PATH --work-dir DIR --run-id ID

Watches wake it; each pass lists everything and reconciles it level by level
(and a pass runs at least every second, for container exits and expiry):

- SandboxWarmPool: keeps spec.replicas Sandboxes (generateName "<pool>-")
  built from its SandboxTemplate, owned by the pool; status replicas,
  readyReplicas, selector.
- SandboxClaim: the Sandbox named in its status or its agents.x-k8s.io/
  sandbox-name annotation, or one named as the claim, or a warm pool member
  with pod IPs (a Ready one first) adopted (the annotation first, then the
  Sandbox's labels and owner moved to the claim), or after 2 s without one a
  new Sandbox named as the claim (launch-type cold); status Ready copied from
  the Sandbox's, status.sandbox {name, podIPs, serviceFQDN}; lifecycle expiry.
- Sandbox: its PersistentVolumeClaims ("<template>-<sandbox>", from
  spec.volumeClaimTemplates), its Pod (named as the Sandbox, owned by it), its headless Service
  when spec.service is true, its status (conditions Suspended, PodScheduled,
  Finished, Ready; podIPs, nodeName, selector, service, serviceFQDN), and
  spec.shutdownTime: the Pod and Service deleted, and the Sandbox too under
  shutdownPolicy Delete.
- The garbage collector, for the kinds above only: a Sandbox, Pod, Service or
  PersistentVolumeClaim whose owners are all gone is deleted; an owner deleted in the foreground
  loses its finalizer once its dependents are gone. Secrets are left alone.
- The pvc-protection controller: a PersistentVolumeClaim being deleted goes
  once no unfinished Pod uses it.
- Kueue: a Pod created with the label kueue.x-k8s.io/queue-name gets the
  scheduling gate kueue.x-k8s.io/admission (the tests remove it to admit it).

Each action is one line on stderr. SIGTERM or SIGINT: every podman container
of this run is removed, then it exits 0."""

import argparse
import json
import os
import signal
import sys
import threading
import time
import traceback

from kubernetes import client, config, watch

import agent_sandbox as a
from fake_node import FakeNode

SANDBOXES = (a.GROUP, a.VERSION, "sandboxes")
CLAIMS = (a.EXTENSIONS_GROUP, a.VERSION, "sandboxclaims")
POOLS = (a.EXTENSIONS_GROUP, a.VERSION, "sandboxwarmpools")
TEMPLATES = (a.EXTENSIONS_GROUP, a.VERSION, "sandboxtemplates")
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
ADMISSION_GATE = "kueue.x-k8s.io/admission"
WARM_CANDIDATE_GRACE = 2.0  # warmCandidateGracePeriod
PVC_PROTECTION = "kubernetes.io/pvc-protection"


def log(line):
    sys.stderr.write("%s controller: %s\n" % (time.strftime("%H:%M:%S"), line))
    sys.stderr.flush()


def key(obj):
    return obj["metadata"]["namespace"], obj["metadata"]["name"]


def not_found(e):
    return getattr(e, "status", None) == 404


class Controller:
    def __init__(self, api, work_dir, run_id):
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.node = FakeNode(self.core, work_dir, run_id, log)
        self.claim_status_written = {}

    # --- API helpers ---

    def raw_list(self, call):
        return json.loads(call(_preload_content=False).data)["items"]

    def list_custom(self, kind):
        try:
            return self.custom.list_cluster_custom_object(*kind)["items"]
        except client.ApiException as e:
            if not_found(e):  # a cluster started without the CRDs
                return []
            raise

    def create_custom(self, kind, obj):
        return self.custom.create_namespaced_custom_object(*kind[:2], obj["metadata"]["namespace"], kind[2], obj)

    def delete_custom(self, kind, obj, propagation=None):
        try:
            self.custom.delete_namespaced_custom_object(*kind[:2], obj["metadata"]["namespace"], kind[2],
                                                        obj["metadata"]["name"], propagation_policy=propagation)
        except client.ApiException as e:
            if not not_found(e):
                raise

    def patch_status(self, kind, obj, status):
        """A merge patch of status: what `status` lacks of the old status is removed."""
        body = dict(status)
        for k in (obj.get("status") or {}):
            body.setdefault(k, None)
        self.custom.patch_namespaced_custom_object_status(*kind[:2], obj["metadata"]["namespace"], kind[2],
                                                          obj["metadata"]["name"], {"status": body})
        obj["status"] = status

    # --- one pass ---

    def reconcile(self):
        sandboxes = self.list_custom(SANDBOXES)
        claims = self.list_custom(CLAIMS)
        pools = self.list_custom(POOLS)
        templates = {key(t): t for t in self.list_custom(TEMPLATES)}
        pods = self.raw_list(self.core.list_pod_for_all_namespaces)
        services = self.raw_list(self.core.list_service_for_all_namespaces)
        volume_claims = self.raw_list(self.core.list_persistent_volume_claim_for_all_namespaces)
        self.collect_garbage([("Sandbox", s) for s in sandboxes] + [("SandboxClaim", c) for c in claims] +
                             [("SandboxWarmPool", p) for p in pools],
                             [(SANDBOXES, s) for s in sandboxes] + [("pod", p) for p in pods] +
                             [("service", s) for s in services] + [("pvc", c) for c in volume_claims])
        self.protect_volume_claims(volume_claims, pods)
        self.node.prune_volumes({key(c) for c in volume_claims})
        for pool in pools:
            self.guard("warm pool", pool, self.reconcile_pool, pool, templates, sandboxes)
        for claim in claims:
            self.guard("claim", claim, self.reconcile_claim, claim, templates, pools, sandboxes)
        pods_by_key = {key(p): p for p in pods}
        services_by_key = {key(s): s for s in services}
        claims_by_key = {key(c) for c in volume_claims}
        for sandbox in sandboxes:
            self.guard("sandbox", sandbox, self.reconcile_sandbox, sandbox, pods_by_key, services_by_key,
                       claims_by_key)
        self.node.sync(self.raw_list(self.core.list_pod_for_all_namespaces))

    @staticmethod
    def guard(what, obj, fn, *args):
        try:
            fn(*args)
        except Exception as e:
            if not not_found(e) and getattr(e, "status", None) != 409:  # a stale view: the next pass retries
                log("%s %s/%s: %s" % (what, *key(obj), "".join(traceback.format_exception_only(e)).strip()))

    # --- garbage collector ---

    def collect_garbage(self, owners, dependents):
        present = {o["metadata"]["uid"] for _, o in owners if not o["metadata"].get("deletionTimestamp")}
        known = {"Sandbox", "SandboxClaim", "SandboxWarmPool"}
        remaining = {}
        for kind, obj in dependents:
            refs = [r for r in obj["metadata"].get("ownerReferences") or [] if r.get("kind") in known]
            if not refs or len(refs) != len(obj["metadata"].get("ownerReferences") or []):
                continue
            if any(r["uid"] in present for r in refs):
                continue
            for r in refs:
                remaining[r["uid"]] = True
            if obj["metadata"].get("deletionTimestamp"):
                continue
            ns, name = key(obj)
            try:
                if kind == "pod":
                    self.core.delete_namespaced_pod(name, ns)
                elif kind == "service":
                    self.core.delete_namespaced_service(name, ns)
                elif kind == "pvc":
                    self.core.delete_namespaced_persistent_volume_claim(name, ns)
                else:
                    self.delete_custom(kind, obj)
                log("gc: deleted %s %s/%s (its owner is gone)" % (kind if isinstance(kind, str) else "sandbox", ns, name))
            except client.ApiException as e:
                if not not_found(e):
                    raise
        kinds = {"Sandbox": SANDBOXES, "SandboxClaim": CLAIMS, "SandboxWarmPool": POOLS}
        for kind, owner in owners:
            finalizers = owner["metadata"].get("finalizers") or []
            if (owner["metadata"].get("deletionTimestamp") and "foregroundDeletion" in finalizers
                    and owner["metadata"]["uid"] not in remaining):
                group, version, plural = kinds[kind]
                self.custom.patch_namespaced_custom_object(
                    group, version, owner["metadata"]["namespace"], plural, owner["metadata"]["name"],
                    {"metadata": {"finalizers": [f for f in finalizers if f != "foregroundDeletion"] or None,
                                  "resourceVersion": owner["metadata"]["resourceVersion"]}})
                log("gc: %s %s/%s has no dependents left, deleted" % (kind, *key(owner)))

    def protect_volume_claims(self, volume_claims, pods):
        """The pvc-protection controller: a deleted claim that no unfinished Pod uses loses the
        kubernetes.io/pvc-protection finalizer (the API server's admission adds it to every claim)."""
        in_use = set()
        for pod in pods:
            if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                for volume in pod["spec"].get("volumes") or []:
                    if volume.get("persistentVolumeClaim"):
                        in_use.add((pod["metadata"]["namespace"], volume["persistentVolumeClaim"]["claimName"]))
        for pvc in volume_claims:
            finalizers = pvc["metadata"].get("finalizers") or []
            if pvc["metadata"].get("deletionTimestamp") and PVC_PROTECTION in finalizers and key(pvc) not in in_use:
                self.core.patch_namespaced_persistent_volume_claim(*reversed(key(pvc)), {"metadata": {
                    "finalizers": [f for f in finalizers if f != PVC_PROTECTION] or None,
                    "resourceVersion": pvc["metadata"]["resourceVersion"]}})
                log("persistent volume claim %s/%s: no pod uses it, deleted" % key(pvc))

    # --- SandboxWarmPool ---

    def pool_members(self, pool, sandboxes):
        pool_hash = a.name_hash(pool["metadata"]["name"])
        return [s for s in sandboxes if s["metadata"]["namespace"] == pool["metadata"]["namespace"]
                and (s["metadata"].get("labels") or {}).get(a.WARM_POOL_LABEL) == pool_hash
                and a.controlled_by(s, pool) and not s["metadata"].get("deletionTimestamp")]

    def reconcile_pool(self, pool, templates, sandboxes):
        if pool["metadata"].get("deletionTimestamp"):
            return
        members = self.pool_members(pool, sandboxes)
        desired = pool["spec"].get("replicas", 1)
        template = templates.get((pool["metadata"]["namespace"], pool["spec"]["sandboxTemplateRef"]["name"]))
        status = {"replicas": len(members), "readyReplicas": sum(1 for s in members if a.is_ready(s)),
                  "selector": a.WARM_POOL_LABEL + "=" + a.name_hash(pool["metadata"]["name"]),
                  "observedGeneration": pool["metadata"].get("generation", 1)}
        if status["readyReplicas"] == 0:
            del status["readyReplicas"]  # omitempty
        if status["replicas"] == 0:
            del status["replicas"]
        if status != (pool.get("status") or {}):
            self.patch_status(POOLS, pool, status)
        if template is not None:
            for _ in range(desired - len(members)):
                made = self.create_custom(SANDBOXES, a.pool_sandbox(pool, template))
                log("warm pool %s/%s: created sandbox %s" % (*key(pool), made["metadata"]["name"]))
        # Too many: the not-Ready go first, then the newest.
        extra = sorted(members, key=lambda s: (a.is_ready(s), s["metadata"]["creationTimestamp"]))
        for sandbox in extra[:max(0, len(members) - desired)]:
            self.delete_custom(SANDBOXES, sandbox)
            log("warm pool %s/%s: deleted sandbox %s (over replicas)" % (*key(pool), sandbox["metadata"]["name"]))

    # --- SandboxClaim ---

    def reconcile_claim(self, claim, templates, pools, sandboxes):
        meta = claim["metadata"]
        if meta.get("deletionTimestamp"):
            return
        ns = meta["namespace"]
        by_name = {s["metadata"]["name"]: s for s in sandboxes if s["metadata"]["namespace"] == ns}
        status = json.loads(json.dumps(claim.get("status") or {}))
        conds = status.setdefault("conditions", [])
        lifecycle = claim["spec"].get("lifecycle") or {}
        expire = a.expire_at(lifecycle.get("shutdownTime"), lifecycle.get("ttlSecondsAfterFinished"),
                             a.find_condition(conds, "Finished"))
        expired = expire is not None and a.now() >= expire
        ready = a.find_condition(conds, "Ready")
        if expired and not (ready and ready.get("reason") == "ClaimExpired"):
            a.set_condition(conds, a.claim_ready_condition(claim, None, expired=True))
            self.patch_status(CLAIMS, claim, status)
            log("claim %s/%s: expired" % key(claim))
            return
        if expired and lifecycle.get("shutdownPolicy") in ("Delete", "DeleteForeground"):
            self.delete_custom(CLAIMS, claim,
                               "Foreground" if lifecycle["shutdownPolicy"] == "DeleteForeground" else None)
            log("claim %s/%s: deleted (expired, shutdownPolicy %s)" % (*key(claim), lifecycle["shutdownPolicy"]))
            return
        error = None
        if expired:
            sandbox = by_name.get((claim.get("status") or {}).get("sandbox", {}).get("name") or meta["name"])
            if sandbox is not None and a.controlled_by(sandbox, claim):
                if not sandbox["metadata"].get("deletionTimestamp"):
                    self.delete_custom(SANDBOXES, sandbox)
                    log("claim %s/%s: deleted sandbox %s (expired, Retain)" % (*key(claim), sandbox["metadata"]["name"]))
            elif sandbox is not None:
                error = ("ClaimExpired", "Claim expired. sandbox %r is not owned by claim %r; deletion skipped."
                         % (sandbox["metadata"]["name"], meta["name"]))
                sandbox = None
        else:
            try:
                sandbox = self.claim_sandbox(claim, by_name, templates, pools)
            except WaitForWarm:
                return
            except ClaimError as e:
                sandbox, error = None, e.args
        a.set_condition(conds, a.claim_ready_condition(claim, sandbox, error, expired))
        finished = a.find_condition(((sandbox or {}).get("status") or {}).get("conditions"), "Finished")
        if sandbox is not None or not expired:
            conds[:] = [c for c in conds if c["type"] != "Finished"]
            if finished:
                conds.append(dict(finished))
        if sandbox is not None:
            sb = {"name": sandbox["metadata"]["name"]}
            if (sandbox.get("status") or {}).get("podIPs"):
                sb["podIPs"] = sandbox["status"]["podIPs"]
            if (sandbox.get("status") or {}).get("serviceFQDN"):
                sb["serviceFQDN"] = sandbox["status"]["serviceFQDN"]
            status["sandbox"] = sb
        elif error is None:
            status.pop("sandbox", None)
        if status != (claim.get("status") or {}):
            self.patch_status(CLAIMS, claim, status)
            log("claim %s/%s: status Ready=%s (%s)" % (*key(claim), a.find_condition(conds, "Ready")["status"],
                                                        a.find_condition(conds, "Ready")["reason"]))

    def claim_sandbox(self, claim, by_name, templates, pools):
        """getOrCreateSandbox, then the cold path: the claim's Sandbox, or raises WaitForWarm or ClaimError."""
        meta = claim["metadata"]
        ns = meta["namespace"]
        named = ((claim.get("status") or {}).get("sandbox") or {}).get("name")
        if named and named in by_name and a.controlled_by(by_name[named], claim):
            return by_name[named]
        assigned = (meta.get("annotations") or {}).get(a.ASSIGNED_SANDBOX_ANNOTATION)
        if assigned:
            sandbox = by_name.get(assigned)
            if sandbox is not None and a.controlled_by(sandbox, claim):
                return sandbox
            ref = a.controller_of(sandbox) if sandbox else None
            if ref and ref.get("kind") == "SandboxWarmPool":
                return self.complete_adoption(claim, sandbox, templates, pools)
            self.custom.patch_namespaced_custom_object(*CLAIMS[:2], ns, CLAIMS[2], meta["name"], {
                "metadata": {"annotations": {a.ASSIGNED_SANDBOX_ANNOTATION: None}}})
            log("claim %s/%s: removed the stale %s annotation" % (*key(claim), a.ASSIGNED_SANDBOX_ANNOTATION))
        own = by_name.get(meta["name"])
        if own is not None:
            if not a.controlled_by(own, claim):
                raise ClaimError("ReconcilerError", "Error seen: sandbox %q is not controlled by claim %q. Please use a "
                                 "different claim name or delete the sandbox manually" % (meta["name"], meta["name"]))
            return own
        pool_name = claim["spec"]["warmPoolRef"]["name"]
        if not claim["spec"].get("env") and not claim["spec"].get("volumeClaimTemplates"):
            candidates = [s for s in by_name.values() if self.adoptable(s, pool_name)]
            with_ips = sorted((s for s in candidates if (s.get("status") or {}).get("podIPs")),
                              key=lambda s: not a.is_ready(s))
            if with_ips:
                sandbox = with_ips[0]
                self.custom.patch_namespaced_custom_object(*CLAIMS[:2], ns, CLAIMS[2], meta["name"], {
                    "metadata": {"annotations": {a.ASSIGNED_SANDBOX_ANNOTATION: sandbox["metadata"]["name"]},
                                 "resourceVersion": meta["resourceVersion"]}})
                return self.complete_adoption(claim, sandbox, templates, pools)
            age = (a.now() - a.parse_time(meta["creationTimestamp"])).total_seconds()
            if candidates and age < WARM_CANDIDATE_GRACE:
                raise WaitForWarm()
        pool = next((p for p in pools if key(p) == (ns, pool_name)), None)
        if pool is None:
            raise ClaimError("WarmPoolNotFound", "SandboxWarmPool %q not found" % pool_name)
        template = templates.get((ns, pool["spec"]["sandboxTemplateRef"]["name"]))
        if template is None:
            raise ClaimError("TemplateNotFound", 'sandboxtemplates.extensions.agents.x-k8s.io "%s" not found'
                             % pool["spec"]["sandboxTemplateRef"]["name"])
        try:
            body = a.cold_sandbox(claim, template)
        except ValueError as e:
            reason = "EnvVarsInjectionRejected" if "EnvVarsInjection" in str(e) else "InvalidMetadata"
            raise ClaimError(reason, str(e))
        made = self.create_custom(SANDBOXES, body)
        log("claim %s/%s: created sandbox %s (cold)" % (*key(claim), made["metadata"]["name"]))
        return made

    @staticmethod
    def adoptable(sandbox, pool_name):
        labels = sandbox["metadata"].get("labels") or {}
        ref = a.controller_of(sandbox)
        return (not sandbox["metadata"].get("deletionTimestamp") and a.WARM_POOL_LABEL in labels
                and a.TEMPLATE_REF_HASH_LABEL in labels and ref is not None
                and ref.get("kind") == "SandboxWarmPool" and ref.get("name") == pool_name)

    def complete_adoption(self, claim, sandbox, templates, pools):
        ns = claim["metadata"]["namespace"]
        pool = next((p for p in pools if key(p) == (ns, claim["spec"]["warmPoolRef"]["name"])), None)
        template = templates.get((ns, pool["spec"]["sandboxTemplateRef"]["name"])) if pool else None
        if template is None:
            template = {"metadata": {"name": (sandbox["metadata"].get("annotations") or {}).get(
                a.TEMPLATE_REF_ANNOTATION, "")}, "spec": {"podTemplate": sandbox["spec"]["podTemplate"]}}
        body = a.adopt(json.loads(json.dumps(sandbox)), claim, template)
        # A replace carries the resourceVersion: adoption from a stale view fails (409) and is redone.
        made = self.custom.replace_namespaced_custom_object(*SANDBOXES[:2], ns, SANDBOXES[2],
                                                            sandbox["metadata"]["name"], body)
        log("claim %s/%s: adopted warm sandbox %s" % (*key(claim), sandbox["metadata"]["name"]))
        return made

    # --- Sandbox ---

    def reconcile_sandbox(self, sandbox, pods, services, volume_claims):
        meta, spec = sandbox["metadata"], sandbox["spec"]
        if meta.get("deletionTimestamp"):
            return
        ns = meta["namespace"]
        for body in a.claims_for(sandbox):
            if key(body) not in volume_claims:
                self.core.create_namespaced_persistent_volume_claim(ns, body, _preload_content=False)
                log("sandbox %s/%s: created persistent volume claim %s" % (*key(sandbox), body["metadata"]["name"]))
        pod = pods.get((ns, a.pod_name(sandbox)))
        service = services.get((ns, meta["name"]))
        expire = a.expire_at(spec.get("shutdownTime"))
        if expire is not None and a.now() >= expire:
            self.expire_sandbox(sandbox, pod, service)
            return
        if spec.get("operatingMode") == "Suspended":
            if pod is not None and a.controlled_by(pod, sandbox) and not pod["metadata"].get("deletionTimestamp"):
                self.core.delete_namespaced_pod(pod["metadata"]["name"], ns)
                log("sandbox %s/%s: suspended, deleted its pod" % key(sandbox))
        elif pod is None:
            body = a.pod_for(sandbox)
            if QUEUE_LABEL in body["metadata"]["labels"]:  # Kueue's pod webhook
                body["spec"].setdefault("schedulingGates", []).append({"name": ADMISSION_GATE})
                body["metadata"]["labels"]["kueue.x-k8s.io/managed"] = "true"
            pod = json.loads(self.core.create_namespaced_pod(ns, body, _preload_content=False).data)
            log("sandbox %s/%s: created pod%s" % (*key(sandbox), " (gated by Kueue)" if QUEUE_LABEL in
                                                 body["metadata"]["labels"] else ""))
        elif a.controlled_by(pod, sandbox):
            self.sync_pod_labels(sandbox, pod)
        if spec.get("service") and service is None:
            service = json.loads(self.core.create_namespaced_service(ns, a.service_for(sandbox),
                                                                     _preload_content=False).data)
            log("sandbox %s/%s: created headless service" % key(sandbox))
        elif spec.get("service") is False and service is not None:
            if a.controlled_by(service, sandbox):
                self.core.delete_namespaced_service(meta["name"], ns)
                log("sandbox %s/%s: deleted its service (spec.service false)" % key(sandbox))
            service = None
        status = a.sandbox_status(sandbox, pod, service)
        if status != (sandbox.get("status") or {}):
            self.patch_status(SANDBOXES, sandbox, status)
            ready = a.find_condition(status["conditions"], "Ready")
            log("sandbox %s/%s: status Ready=%s (%s: %s)" % (*key(sandbox), ready["status"], ready["reason"],
                                                              ready["message"]))

    def sync_pod_labels(self, sandbox, pod):
        """updatePodMetadata: the Pod's labels follow its Sandbox's (after an adoption)."""
        want = a.pod_labels(sandbox)
        have = pod["metadata"].get("labels") or {}
        patch = {k: v for k, v in want.items() if have.get(k) != v}
        patch.update({k: None for k in a.EXTENSION_POD_LABELS if k in have and k not in want})
        if patch:
            self.core.patch_namespaced_pod(pod["metadata"]["name"], pod["metadata"]["namespace"],
                                           {"metadata": {"labels": patch}})
            log("sandbox %s/%s: pod labels updated: %s" % (*key(sandbox), ", ".join(sorted(patch))))

    def expire_sandbox(self, sandbox, pod, service):
        """checkSandboxExpiry and handleSandboxExpiry: mark, then tear down, then apply shutdownPolicy."""
        status = json.loads(json.dumps(sandbox.get("status") or {}))
        conds = status.setdefault("conditions", [])
        ready = a.find_condition(conds, "Ready")
        if not (ready and ready.get("reason") == "SandboxExpired"):
            a.set_condition(conds, a.expired_condition(sandbox))
            conds[:] = [c for c in conds if c["type"] != "PodScheduled"]
            self.patch_status(SANDBOXES, sandbox, status)
            log("sandbox %s/%s: expired" % key(sandbox))
            return
        ns = sandbox["metadata"]["namespace"]
        if pod is not None and a.controlled_by(pod, sandbox) and not pod["metadata"].get("deletionTimestamp"):
            self.core.delete_namespaced_pod(pod["metadata"]["name"], ns)
            log("sandbox %s/%s: expired, deleted its pod" % key(sandbox))
        if service is not None and a.controlled_by(service, sandbox):
            self.core.delete_namespaced_service(service["metadata"]["name"], ns)
            log("sandbox %s/%s: expired, deleted its service" % key(sandbox))
        if sandbox["spec"].get("shutdownPolicy") == "Delete":
            self.delete_custom(SANDBOXES, sandbox)
            log("sandbox %s/%s: expired, deleted (shutdownPolicy Delete)" % key(sandbox))
            return
        status = {"conditions": conds}
        if status != (sandbox.get("status") or {}):
            self.patch_status(SANDBOXES, sandbox, status)


class WaitForWarm(Exception):
    """A warm pool member has no pod IP yet and the claim is younger than the grace period."""


class ClaimError(Exception):
    """(reason, message) of the claim's Ready condition."""


def watch_forever(list_call, args, wake, stopping):
    """Wakes the loop on every event of one kind (the watch is only a trigger)."""
    while not stopping.is_set():
        try:
            for _ in watch.Watch().stream(list_call, *args, timeout_seconds=30, _request_timeout=40):
                wake.set()
                if stopping.is_set():
                    return
        except Exception:
            time.sleep(0.5)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--run-id", required=True)
    args = parser.parse_args()
    os.makedirs(args.work_dir, exist_ok=True)
    api = config.new_client_from_config(config_file=args.kubeconfig)
    controller = Controller(api, os.path.abspath(args.work_dir), args.run_id)
    wake, stopping = threading.Event(), threading.Event()

    def stop(signum, frame):
        stopping.set()
        wake.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    for call, call_args in [(custom.list_cluster_custom_object, SANDBOXES),
                            (custom.list_cluster_custom_object, CLAIMS),
                            (custom.list_cluster_custom_object, POOLS),
                            (core.list_pod_for_all_namespaces, ()),
                            (core.list_persistent_volume_claim_for_all_namespaces, ()),
                            (core.list_secret_for_all_namespaces, ())]:
        threading.Thread(target=watch_forever, args=(call, call_args, wake, stopping), daemon=True).start()
    log("running (run id %s)" % args.run_id)
    while not stopping.is_set():
        wake.wait(1.0)
        wake.clear()
        if stopping.is_set():
            break
        time.sleep(0.02)  # let a burst of events land in one pass
        try:
            controller.reconcile()
        except Exception:
            log("pass failed: " + traceback.format_exc().strip().replace("\n", " | "))
            time.sleep(0.5)
    controller.node.remove_all()
    log("stopped, containers removed")
    sys.exit(0)


if __name__ == "__main__":
    main()
