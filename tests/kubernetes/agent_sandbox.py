"""The objects and fields sigs.k8s.io/agent-sandbox v1.0.1's controllers write
(controllers/sandbox_controller.go, extensions/controllers/
sandbox{claim,warmpool}_controller.go), as pure functions over the dicts the
kubernetes client returns: names, labels, annotations, owner references,
conditions. The test controller (controller.py) writes what these return, so
gpubox's backend reads in the tests exactly the fields it reads on a real
cluster. One deliberate difference: the real controllers hash Go's JSON of a
template for the two template-hash labels; here it is Python's JSON, so those
two values differ from a real cluster's (nothing should compare them)."""

import datetime
import json

GROUP = "agents.x-k8s.io"
EXTENSIONS_GROUP = "extensions.agents.x-k8s.io"
VERSION = "v1beta1"

# Labels and annotations (api/v1beta1/sandbox_types.go, extensions/api/v1beta1/*.go).
NAME_HASH_LABEL = "agents.x-k8s.io/sandbox-name-hash"
POD_NAME_ANNOTATION = "agents.x-k8s.io/pod-name"
TEMPLATE_REF_ANNOTATION = "agents.x-k8s.io/sandbox-template-ref"
LAUNCH_TYPE_LABEL = "agents.x-k8s.io/launch-type"
CREATED_BY_LABEL = "agents.x-k8s.io/created-by"
POD_TEMPLATE_HASH_LABEL = "agents.x-k8s.io/sandbox-pod-template-hash"
TEMPLATE_HASH_LABEL = "agents.x-k8s.io/sandbox-template-hash"
PROPAGATED_LABELS_ANNOTATION = "agents.x-k8s.io/propagated-labels"
PROPAGATED_ANNOTATIONS_ANNOTATION = "agents.x-k8s.io/propagated-annotations"
WARM_POOL_LABEL = "agents.x-k8s.io/warm-pool-sandbox"
TEMPLATE_REF_HASH_LABEL = "agents.x-k8s.io/sandbox-template-ref-hash"
CLAIM_UID_LABEL = "agents.x-k8s.io/claim-uid"
ASSIGNED_SANDBOX_ANNOTATION = "agents.x-k8s.io/sandbox-name"
SAFE_TO_EVICT_ANNOTATION = "cluster-autoscaler.kubernetes.io/safe-to-evict"
TRACE_CONTEXT_ANNOTATION = "opentelemetry.io/trace-context"
EXTENSION_POD_LABELS = (CLAIM_UID_LABEL, WARM_POOL_LABEL, TEMPLATE_REF_HASH_LABEL)


def name_hash(text):
    """controllers.NameHash: FNV-1a (32 bits) of text as 8 hex digits."""
    h = 0x811C9DC5
    for byte in text.encode():
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return "%08x" % h


def json_hash(value):
    return name_hash(json.dumps(value, sort_keys=True, separators=(",", ":")))


def now():
    return datetime.datetime.now(datetime.timezone.utc)


def timestamp(when=None):
    return (when or now()).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text):
    if not text:
        return None
    if isinstance(text, datetime.datetime):
        return text if text.tzinfo else text.replace(tzinfo=datetime.timezone.utc)
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def system_key(key):
    """Keys a pod template may not set (hasSystemReservedPrefix)."""
    return key.startswith("agents.x-k8s.io/") or key.startswith("extensions.agents.x-k8s.io/")


def normalize_created_by(value):
    return value if value in ("go-client", "python-client", "controller") else "unknown"


def controller_of(obj):
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return ref
    return None


def controlled_by(obj, owner):
    ref = controller_of(obj)
    return bool(ref) and ref.get("uid") == owner["metadata"]["uid"]


def controller_ref(owner, api_version, kind):
    """ctrl.SetControllerReference's entry."""
    return {"apiVersion": api_version, "kind": kind, "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}


def condition(type_, status, reason, message, generation):
    return {"type": type_, "status": status, "reason": reason, "message": message,
            "observedGeneration": generation, "lastTransitionTime": timestamp()}


def set_condition(conditions, new):
    """meta.SetStatusCondition: lastTransitionTime changes only with the status."""
    for i, old in enumerate(conditions):
        if old["type"] == new["type"]:
            if old.get("status") == new["status"]:
                new = dict(new, lastTransitionTime=old.get("lastTransitionTime") or new["lastTransitionTime"])
            conditions[i] = new
            return
    conditions.append(new)


def find_condition(conditions, type_):
    for c in conditions or []:
        if c.get("type") == type_:
            return c
    return None


def is_ready(sandbox):
    c = find_condition((sandbox.get("status") or {}).get("conditions"), "Ready")
    return bool(c) and c.get("status") == "True"


def pod_name(sandbox):
    """resolvePodName: the Sandbox's own name unless the legacy annotation names another."""
    return (sandbox["metadata"].get("annotations") or {}).get(POD_NAME_ANNOTATION) or sandbox["metadata"]["name"]


def extension_pod_labels(sandbox):
    """computeExtensionPodLabels: what a claim- or pool-owned Sandbox passes to its Pod."""
    ref = controller_of(sandbox)
    if not ref or ref.get("apiVersion", "").split("/")[0] != EXTENSIONS_GROUP:
        return {}
    labels = sandbox["metadata"].get("labels") or {}
    out = {}
    if ref.get("kind") == "SandboxClaim" and labels.get(CLAIM_UID_LABEL):
        out[CLAIM_UID_LABEL] = labels[CLAIM_UID_LABEL]
    if ref.get("kind") == "SandboxWarmPool" and labels.get(WARM_POOL_LABEL):
        out[WARM_POOL_LABEL] = labels[WARM_POOL_LABEL]
    if labels.get(TEMPLATE_REF_HASH_LABEL):
        out[TEMPLATE_REF_HASH_LABEL] = labels[TEMPLATE_REF_HASH_LABEL]
    return out


def pod_labels(sandbox):
    template = sandbox["spec"]["podTemplate"].get("metadata") or {}
    labels = {k: v for k, v in (template.get("labels") or {}).items() if not system_key(k)}
    labels[NAME_HASH_LABEL] = name_hash(sandbox["metadata"]["name"])
    labels.update(extension_pod_labels(sandbox))
    created_by = (sandbox["metadata"].get("labels") or {}).get(CREATED_BY_LABEL)
    if created_by:
        labels[CREATED_BY_LABEL] = normalize_created_by(created_by)
    return labels


def pod_for(sandbox):
    """The Pod reconcilePod creates for a Sandbox."""
    template = sandbox["spec"]["podTemplate"]
    meta = template.get("metadata") or {}
    user_labels = sorted(k for k in (meta.get("labels") or {}) if not system_key(k))
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items()
                   if not system_key(k) and k != TRACE_CONTEXT_ANNOTATION}
    user_annotations = sorted(annotations)
    if user_labels:
        annotations[PROPAGATED_LABELS_ANNOTATION] = ",".join(user_labels)
    if user_annotations:
        annotations[PROPAGATED_ANNOTATIONS_ANNOTATION] = ",".join(user_annotations)
    spec = json.loads(json.dumps(template["spec"]))
    claims = [{"name": t["metadata"]["name"],
               "persistentVolumeClaim": {"claimName": t["metadata"]["name"] + "-" + sandbox["metadata"]["name"]}}
              for t in sandbox["spec"].get("volumeClaimTemplates") or []]
    if claims:  # MergeVolumeClaimVolumes: a template's volume replaces one of the same name
        names = {v["name"] for v in claims}
        spec["volumes"] = [v for v in spec.get("volumes") or [] if v["name"] not in names] + claims
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": sandbox["metadata"]["name"], "namespace": sandbox["metadata"]["namespace"],
                     "labels": pod_labels(sandbox), "annotations": annotations,
                     "ownerReferences": [controller_ref(sandbox, GROUP + "/" + VERSION, "Sandbox")]},
        "spec": spec,
    }


def claims_for(sandbox):
    """The PersistentVolumeClaims reconcilePVCs creates from spec.volumeClaimTemplates ("<template>-<sandbox>")."""
    out = []
    for t in sandbox["spec"].get("volumeClaimTemplates") or []:
        meta = t.get("metadata") or {}
        labels = dict(meta.get("labels") or {})
        labels[NAME_HASH_LABEL] = name_hash(sandbox["metadata"]["name"])
        out.append({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "metadata": {"name": meta["name"] + "-" + sandbox["metadata"]["name"],
                                 "namespace": sandbox["metadata"]["namespace"], "labels": labels,
                                 "annotations": dict(meta.get("annotations") or {}),
                                 "ownerReferences": [controller_ref(sandbox, GROUP + "/" + VERSION, "Sandbox")]},
                    "spec": t["spec"]})
    return out


def service_for(sandbox):
    """The headless Service reconcileService creates when spec.service is true."""
    nh = name_hash(sandbox["metadata"]["name"])
    ports, seen = [], set()
    for c in sandbox["spec"]["podTemplate"]["spec"].get("containers") or []:
        for p in c.get("ports") or []:
            key = (p["containerPort"], p.get("protocol") or "TCP")
            if key in seen:
                continue
            seen.add(key)
            port = {"port": key[0], "protocol": key[1], "targetPort": key[0]}
            if p.get("name"):
                port["name"] = p["name"]
            ports.append(port)
    spec = {"clusterIP": "None", "selector": {NAME_HASH_LABEL: nh}}
    if ports:
        spec["ports"] = ports
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": sandbox["metadata"]["name"], "namespace": sandbox["metadata"]["namespace"],
                         "labels": {NAME_HASH_LABEL: nh},
                         "ownerReferences": [controller_ref(sandbox, GROUP + "/" + VERSION, "Sandbox")]},
            "spec": spec}


def sandbox_ready_condition(sandbox, pod, service):
    """computeReadyCondition (no reconcile error)."""
    gen = sandbox["metadata"].get("generation", 1)
    spec = sandbox["spec"]
    if spec.get("operatingMode") == "Suspended":
        return condition("Ready", "False", "SandboxSuspended",
                         "Sandbox is suspending" if pod else "Sandbox is suspended", gen)
    phase = (pod or {}).get("status", {}).get("phase")
    if phase == "Succeeded":
        return condition("Ready", "False", "PodSucceeded", "Pod completed successfully", gen)
    if phase == "Failed":
        return condition("Ready", "False", "PodFailed", "Pod failed", gen)
    ready = False
    if pod:
        message = "Pod exists with phase: " + (phase or "")
        if phase == "Running":
            message = "Pod is Running but not Ready"
            c = find_condition(pod["status"].get("conditions"), "Ready")
            if c and c.get("status") == "True":
                if pod["status"].get("podIPs"):
                    message, ready = "Pod is Ready", True
                else:
                    message = "Pod is Ready but has no podIPs yet"
    else:
        message = "Pod does not exist"
    need_service = spec["service"] if spec.get("service") is not None else service is not None
    if need_service:
        message += "; Service Exists" if service else "; Service does not exist"
        ready = ready and service is not None
    if ready:
        return condition("Ready", "True", "DependenciesReady", message, gen)
    return condition("Ready", "False", "DependenciesNotReady", message, gen)


def sandbox_status(sandbox, pod, service, cluster_domain="cluster.local"):
    """The status reconcileChildResources computes, from the old one."""
    old = sandbox.get("status") or {}
    gen = sandbox["metadata"].get("generation", 1)
    status = {"conditions": [dict(c) for c in old.get("conditions") or []]}
    if old.get("selector"):
        status["selector"] = old["selector"]
    owned = pod is not None and controlled_by(pod, sandbox)
    if pod is not None:
        status["selector"] = NAME_HASH_LABEL + "=" + name_hash(sandbox["metadata"]["name"])
        if owned:
            ips = [p["ip"] for p in pod.get("status", {}).get("podIPs") or []]
            if ips:
                status["podIPs"] = ips
            if pod["spec"].get("nodeName"):
                status["nodeName"] = pod["spec"]["nodeName"]
    if service is not None:
        status["service"] = service["metadata"]["name"]
        status["serviceFQDN"] = "%s.%s.svc.%s" % (service["metadata"]["name"], service["metadata"]["namespace"],
                                                 cluster_domain)
    conds = status["conditions"]
    set_condition(conds, condition("Suspended", "False", "NotSuspended", "Sandbox is not suspended", gen)
                  if sandbox["spec"].get("operatingMode") != "Suspended" else
                  condition("Suspended", "True" if pod is None else "False",
                            "PodTerminated" if pod is None else "PodTerminating",
                            "Pod has been terminated. Sandbox is suspended" if pod is None
                            else "Pod is terminating. Sandbox is suspending", gen))
    phase = (pod or {}).get("status", {}).get("phase")
    if owned and phase in ("Succeeded", "Failed"):
        set_condition(conds, condition("Finished", "True", "Pod" + phase,
                                       "Pod completed successfully" if phase == "Succeeded" else "Pod failed", gen))
    else:
        conds[:] = [c for c in conds if c["type"] != "Finished"]
    if owned:
        scheduled = find_condition(pod.get("status", {}).get("conditions"), "PodScheduled")
        if scheduled:
            reason = scheduled.get("reason") or ("PodScheduled" if scheduled["status"] == "True" else "PodSchedulingUnknown")
            set_condition(conds, condition("PodScheduled", scheduled["status"], reason, scheduled.get("message") or "", gen))
        else:
            set_condition(conds, condition("PodScheduled", "Unknown", "PodSchedulingUnknown",
                                           "Pod has not reported a PodScheduled condition yet", gen))
    else:
        conds[:] = [c for c in conds if c["type"] != "PodScheduled"]
    set_condition(conds, sandbox_ready_condition(sandbox, pod, service))
    return status


def expired_condition(sandbox):
    return condition("Ready", "False", "SandboxExpired", "Sandbox has expired", sandbox["metadata"].get("generation", 1))


def expire_at(shutdown_time, ttl_after_finished=None, finished=None):
    """lifecycle.ExpireAt: the earlier of shutdownTime and Finished + TTL."""
    times = []
    if shutdown_time:
        times.append(parse_time(shutdown_time))
    if ttl_after_finished is not None and finished and finished.get("status") == "True":
        times.append(parse_time(finished["lastTransitionTime"]) + datetime.timedelta(seconds=ttl_after_finished))
    return min(times) if times else None


def secure_defaults(template, pod_spec):
    """ApplySandboxSecureDefaults."""
    if pod_spec.get("automountServiceAccountToken") is None:
        pod_spec["automountServiceAccountToken"] = False
    tspec = template["spec"]
    managed = tspec.get("networkPolicyManagement") in (None, "", "Managed")
    if managed and tspec.get("networkPolicy") is None and not pod_spec.get("dnsPolicy"):
        pod_spec["dnsPolicy"] = "None"
        pod_spec["dnsConfig"] = {"nameservers": ["8.8.8.8", "1.1.1.1"]}


def blueprint(template):
    """SandboxBlueprint: the part of a SandboxTemplate's spec a Sandbox copies."""
    spec = template["spec"]
    out = {"podTemplate": json.loads(json.dumps(spec["podTemplate"]))}
    for key in ("volumeClaimTemplates", "service"):
        if spec.get(key) is not None:
            out[key] = json.loads(json.dumps(spec[key]))
    return out


def pool_sandbox(pool, template):
    """buildSandboxCR: one warm pool member (generateName "<pool>-")."""
    pool_hash = name_hash(pool["metadata"]["name"])
    template_name = pool["spec"]["sandboxTemplateRef"]["name"]
    pod_template_hash = json_hash(template["spec"]["podTemplate"])
    blueprint_hash = json_hash(blueprint(template))
    spec = blueprint(template)
    meta = spec["podTemplate"].setdefault("metadata", {})
    meta.setdefault("labels", {}).update({
        WARM_POOL_LABEL: pool_hash, TEMPLATE_REF_HASH_LABEL: name_hash(template_name),
        POD_TEMPLATE_HASH_LABEL: pod_template_hash, TEMPLATE_HASH_LABEL: blueprint_hash})
    secure_defaults(template, spec["podTemplate"]["spec"])
    return {
        "apiVersion": GROUP + "/" + VERSION, "kind": "Sandbox",
        "metadata": {"generateName": pool["metadata"]["name"] + "-", "namespace": pool["metadata"]["namespace"],
                     "labels": {WARM_POOL_LABEL: pool_hash, TEMPLATE_REF_HASH_LABEL: name_hash(template_name),
                                LAUNCH_TYPE_LABEL: "warm", POD_TEMPLATE_HASH_LABEL: pod_template_hash,
                                TEMPLATE_HASH_LABEL: blueprint_hash, CREATED_BY_LABEL: "controller"},
                     "annotations": {TEMPLATE_REF_ANNOTATION: template_name},
                     "ownerReferences": [controller_ref(pool, EXTENSIONS_GROUP + "/" + VERSION, "SandboxWarmPool")]},
        "spec": spec,
    }


def claim_identity(labels, claim):
    """ensureClaimIdentityLabels."""
    labels = dict(labels or {})
    labels[CLAIM_UID_LABEL] = claim["metadata"]["uid"]
    created_by = (claim["metadata"].get("labels") or {}).get(CREATED_BY_LABEL)
    if created_by:
        labels[CREATED_BY_LABEL] = created_by
    else:
        labels.pop(CREATED_BY_LABEL, None)
    return labels


def merge_claim_metadata(meta, claim):
    """mergePodMetadata: the claim's additionalPodMetadata over the template's (no overrides)."""
    extra = claim["spec"].get("additionalPodMetadata") or {}
    for field in ("labels", "annotations"):
        for k, v in (extra.get(field) or {}).items():
            if (meta.get(field) or {}).get(k, v) != v:
                raise ValueError("%s %q conflicts with the template's value" % (field[:-1], k))
            meta.setdefault(field, {})[k] = v
    return meta


def claim_pod_metadata(claim, template, template_hash):
    meta = json.loads(json.dumps(template["spec"]["podTemplate"].get("metadata") or {}))
    meta["labels"] = claim_identity(meta.get("labels"), claim)
    meta["labels"][TEMPLATE_REF_HASH_LABEL] = template_hash
    return merge_claim_metadata(meta, claim)


def adopt(sandbox, claim, template):
    """completeAdoption: the warm pool Sandbox handed over to the claim (mutates sandbox)."""
    meta = sandbox["metadata"]
    labels = meta.setdefault("labels", {})
    template_hash = labels.get(TEMPLATE_REF_HASH_LABEL) or name_hash(template["metadata"]["name"])
    for key in (WARM_POOL_LABEL, POD_TEMPLATE_HASH_LABEL, TEMPLATE_HASH_LABEL):
        labels.pop(key, None)
    labels[LAUNCH_TYPE_LABEL] = "warm"
    meta["ownerReferences"] = [controller_ref(claim, EXTENSIONS_GROUP + "/" + VERSION, "SandboxClaim")]
    meta["labels"] = claim_identity(labels, claim)
    meta["labels"][TEMPLATE_REF_HASH_LABEL] = template_hash
    sandbox["spec"]["podTemplate"]["metadata"] = claim_pod_metadata(claim, template, template_hash)
    return sandbox


def cold_sandbox(claim, template):
    """createSandbox: the Sandbox a claim gets when no warm one is there (named as the claim)."""
    template_hash = name_hash(template["metadata"]["name"])
    spec = blueprint(template)
    spec["podTemplate"]["metadata"] = claim_pod_metadata(claim, template, template_hash)
    env = claim["spec"].get("env") or []
    if env:
        policy = template["spec"].get("envVarsInjectionPolicy")
        if policy not in ("Allowed", "Overrides"):
            raise ValueError("EnvVarsInjectionRejected: environment variable injection is not allowed by the template policy")
        containers = spec["podTemplate"]["spec"]["containers"]
        for var in env:
            target = next((c for c in containers if c["name"] == var.get("containerName")), None) \
                if var.get("containerName") else containers[0]
            if target is None:
                raise ValueError("target container %q not found in template" % var["containerName"])
            existing = [e for e in target.setdefault("env", []) if e["name"] == var["name"]]
            if existing and policy != "Overrides":
                raise ValueError("EnvVarsInjectionRejected: %s is set by the template" % var["name"])
            target["env"] = [e for e in target["env"] if e["name"] != var["name"]] + \
                [{"name": var["name"], "value": var["value"]}]
    secure_defaults(template, spec["podTemplate"]["spec"])
    labels = claim_identity({}, claim)
    labels[LAUNCH_TYPE_LABEL] = "cold"
    labels[TEMPLATE_REF_HASH_LABEL] = template_hash
    return {
        "apiVersion": GROUP + "/" + VERSION, "kind": "Sandbox",
        "metadata": {"name": claim["metadata"]["name"], "namespace": claim["metadata"]["namespace"],
                     "labels": labels, "annotations": {TEMPLATE_REF_ANNOTATION: template["metadata"]["name"]},
                     "ownerReferences": [controller_ref(claim, EXTENSIONS_GROUP + "/" + VERSION, "SandboxClaim")]},
        "spec": spec,
    }


def claim_ready_condition(claim, sandbox, error=None, expired=False):
    """computeReadyCondition of the claim controller."""
    gen = claim["metadata"].get("generation", 1)
    if error:
        reason, message = error
        return condition("Ready", "False", reason, message, gen)
    if expired:
        return condition("Ready", "False", "ClaimExpired", "Claim expired. Sandbox cleanup initiated.", gen)
    if sandbox is None:
        return condition("Ready", "False", "SandboxMissing", "Sandbox does not exist", gen)
    ready = find_condition((sandbox.get("status") or {}).get("conditions"), "Ready")
    if ready and ready.get("reason") == "SandboxExpired":
        return condition("Ready", "False", "SandboxExpired",
                         "Underlying Sandbox resource has expired independently of the Claim.", gen)
    if ready:
        return dict(ready, observedGeneration=gen)
    return condition("Ready", "False", "SandboxNotReady", "Sandbox is not ready", gen)
