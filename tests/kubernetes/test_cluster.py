"""The test cluster alone (cluster.py, controller.py, fake_node.py), with the
raw kubernetes client and no gpubox: the real API server validates with the
real CRDs, and Sandboxes, warm pools, claims and Kueue's gate behave as the
Kubernetes backend's tests rely on. One cluster for the class, a namespace
per test; tearDownClass checks that stopping it left no container."""

import datetime
import os
import shutil
import socket
import tempfile
import time
import unittest

from cluster import TestCluster
import agent_sandbox as a
import fake_node

IMAGE = "localhost/gpubox-test-busybox:" + (os.environ.get("GPUBOX_TEST_IMAGE_VERSION") or "latest")


def busybox(script, **extra):
    """A pod spec running `sh -c script` in the busybox test image (its ENTRYPOINT is the agent: replaced)."""
    container = {"name": "main", "image": IMAGE, "command": ["/bin/busybox", "sh", "-c", script]}
    container.update(extra)
    return {"restartPolicy": "Never", "containers": [container]}


def sandbox(name, pod_spec, labels=None, **spec):
    body = {"apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox", "metadata": {"name": name},
            "spec": {"podTemplate": {"metadata": {"labels": labels or {}}, "spec": pod_spec}}}
    body["spec"].update(spec)
    return body


class ClusterTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from kubernetes import client
        cls.work = tempfile.mkdtemp(prefix="gpubox-k8s-cluster-test-")
        cls.cluster = TestCluster()
        cls.cluster.start(cls.work)
        if fake_node.podman("image", "exists", IMAGE).returncode != 0:
            cls.cluster.stop()
            from prerequisite import missing
            missing("the image %s is missing (ctest -R image_build_test_images builds it)" % IMAGE)
        cls.core = client.CoreV1Api(cls.cluster.api)
        cls.custom = client.CustomObjectsApi(cls.cluster.api)
        cls.ApiException = client.ApiException

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()
        shutil.rmtree(cls.work, ignore_errors=True)
        left = cls.cluster.containers()
        if left:
            raise AssertionError("containers left after stop(): %s" % left)

    def setUp(self):
        self.ns = self.cluster.namespace("t-" + self._testMethodName.replace("_", "-")[5:40].strip("-"))

    # --- helpers ---

    def create(self, plural, body, group=a.GROUP):
        return self.custom.create_namespaced_custom_object(group, a.VERSION, self.ns, plural, body)

    def get(self, plural, name, group=a.GROUP):
        try:
            return self.custom.get_namespaced_custom_object(group, a.VERSION, self.ns, plural, name)
        except self.ApiException as e:
            if e.status == 404:
                return None
            raise

    def ready_sandbox(self, name, timeout=60):
        return self.cluster.wait("sandbox %s Ready" % name,
                                 lambda: (lambda s: s if s and a.is_ready(s) else None)(self.get("sandboxes", name)),
                                 timeout)

    def container(self, pod):
        return "%s-%s-%s-%s" % (fake_node.LABEL, self.cluster.run_id, self.ns, pod)

    def template_and_pool(self, replicas):
        self.create("sandboxtemplates", {"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxTemplate",
                                         "metadata": {"name": "tmpl"},
                                         "spec": {"podTemplate": {"spec": busybox("exec sleep 600")}}},
                    a.EXTENSIONS_GROUP)
        self.create("sandboxwarmpools", {"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxWarmPool",
                                         "metadata": {"name": "pool"},
                                         "spec": {"replicas": replicas, "sandboxTemplateRef": {"name": "tmpl"}}},
                    a.EXTENSIONS_GROUP)

    def claim(self, name):
        return self.create("sandboxclaims", {"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxClaim",
                                             "metadata": {"name": name}, "spec": {"warmPoolRef": {"name": "pool"}}},
                           a.EXTENSIONS_GROUP)

    def claim_ready(self, name):
        c = self.get("sandboxclaims", name, a.EXTENSIONS_GROUP)
        ready = a.find_condition((c.get("status") or {}).get("conditions"), "Ready")
        return c if ready and ready["status"] == "True" else None

    # --- tests ---

    def test_sandbox_with_secret_volume_runs_and_is_reachable(self):
        self.core.create_namespaced_secret(self.ns, {"metadata": {"name": "keys"}, "stringData": {"curve": "s3cret"}})
        pod = busybox("exec httpd -f -p 7000 -h /keys", ports=[{"containerPort": 7000}],
                      volumeMounts=[{"name": "keys", "mountPath": "/keys"}],
                      resources={"limits": {"cpu": "500m", "memory": "64Mi", "nvidia.com/gpu": "1"}})
        pod["volumes"] = [{"name": "keys", "secret": {"secretName": "keys"}}]
        pod["securityContext"] = {"runAsUser": 1000}  # the 0700 directory and 0400 file are this user's
        made = self.create("sandboxes", sandbox("sb", pod, labels={"app": "gpubox"}, service=True))
        status = self.ready_sandbox("sb")["status"]
        ip = status["podIPs"][0]
        self.assertTrue(ip.startswith("127.77."), ip)
        self.assertEqual(status["selector"], a.NAME_HASH_LABEL + "=" + a.name_hash("sb"))
        ready = a.find_condition(status["conditions"], "Ready")
        self.assertEqual((ready["reason"], ready["message"]), ("DependenciesReady", "Pod is Ready; Service Exists"))
        self.assertEqual((status["service"], status["serviceFQDN"]), ("sb", "sb.%s.svc.cluster.local" % self.ns))
        self.assertEqual(self.core.read_namespaced_service("sb", self.ns).spec.cluster_ip, "None")

        p = self.core.read_namespaced_pod("sb", self.ns)
        self.assertEqual(p.status.phase, "Running")
        self.assertEqual(p.status.pod_ip, ip)
        self.assertEqual(p.metadata.labels, {"app": "gpubox", a.NAME_HASH_LABEL: a.name_hash("sb")})
        self.assertEqual(p.metadata.annotations, {a.PROPAGATED_LABELS_ANNOTATION: "app"})
        owner = p.metadata.owner_references[0]
        self.assertEqual((owner.kind, owner.name, owner.uid, owner.controller),
                         ("Sandbox", "sb", made["metadata"]["uid"], True))

        out = fake_node.podman("exec", self.container("sb"), "/bin/busybox", "cat", "/keys/curve")
        self.assertEqual(out.stdout, "s3cret")
        with socket.create_connection((ip, 7000), timeout=5) as s:  # the pod IP and port reach the container
            s.sendall(b"GET /curve HTTP/1.0\r\n\r\n")
            reply = b""
            while chunk := s.recv(4096):
                reply += chunk
        self.assertTrue(reply.startswith(b"HTTP/1.1 200") and reply.endswith(b"s3cret"), reply)

    def test_schema_rejects_sandbox_without_pod_template(self):
        with self.assertRaises(self.ApiException) as caught:
            self.create("sandboxes", {"apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox",
                                      "metadata": {"name": "bad"}, "spec": {}})
        self.assertEqual(caught.exception.status, 422)
        self.assertIn("podTemplate", caught.exception.body)

    def test_deleting_sandbox_removes_container_and_pod_not_secret(self):
        self.core.create_namespaced_secret(self.ns, {"metadata": {"name": "keep"}, "stringData": {"k": "v"}})
        self.create("sandboxes", sandbox("gone", busybox("exec sleep 600")))
        self.ready_sandbox("gone")
        self.assertIn(self.container("gone"), self.cluster.containers())
        self.custom.delete_namespaced_custom_object(a.GROUP, a.VERSION, self.ns, "sandboxes", "gone")
        self.cluster.wait("the pod and container to go", lambda: self.cluster.objects(self.ns) == ["Secret/keep"]
                          and self.container("gone") not in self.cluster.containers(), 30)

    def test_container_exit_fails_pod_and_sandbox(self):
        self.create("sandboxes", sandbox("ends", busybox("exit 3")))
        pod = self.cluster.wait("the pod to fail", lambda: (lambda p: p if p.status.phase == "Failed" else None)(
            self.core.read_namespaced_pod("ends", self.ns)) if "Pod/ends" in self.cluster.objects(self.ns) else None)
        self.assertEqual(pod.status.container_statuses[0].state.terminated.exit_code, 3)
        ready = self.cluster.wait("Ready False, PodFailed", lambda: (lambda c: c if c and c["reason"] == "PodFailed"
                                  else None)(a.find_condition(self.get("sandboxes", "ends").get("status", {})
                                                              .get("conditions"), "Ready")))
        self.assertEqual(ready["status"], "False")
        finished = a.find_condition(self.get("sandboxes", "ends")["status"]["conditions"], "Finished")
        self.assertEqual((finished["status"], finished["reason"]), ("True", "PodFailed"))

    def test_shutdown_time_deletes_sandbox_under_delete_policy(self):
        soon = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.create("sandboxes", sandbox("brief", busybox("exec sleep 600"), shutdownTime=soon, shutdownPolicy="Delete"))
        self.cluster.wait("the expired sandbox to go", lambda: self.cluster.objects(self.ns) == []
                          and self.container("brief") not in self.cluster.containers(), 30)

    def test_queued_sandbox_waits_for_admission(self):
        self.create("sandboxes", sandbox("queued", busybox("exec sleep 600"),
                                         labels={"kueue.x-k8s.io/queue-name": "gpus"}))
        pod = self.cluster.wait("the gated pod", lambda: "Pod/queued" in self.cluster.objects(self.ns)
                                and self.core.read_namespaced_pod("queued", self.ns))
        self.assertEqual([g.name for g in pod.spec.scheduling_gates], ["kueue.x-k8s.io/admission"])
        scheduled = self.cluster.wait("PodScheduled False", lambda: (lambda c: c if c and c["status"] == "False"
                                      else None)(a.find_condition((self.get("sandboxes", "queued").get("status") or {})
                                                                  .get("conditions"), "PodScheduled")))
        self.assertEqual(scheduled["reason"], "SchedulingGated")
        time.sleep(1)
        self.assertNotIn(self.container("queued"), self.cluster.containers())
        self.assertFalse(a.is_ready(self.get("sandboxes", "queued")))
        self.cluster.admit(self.ns, "queued")
        self.ready_sandbox("queued")
        self.assertIn(self.container("queued"), self.cluster.containers())

    def test_warm_pool_and_claim(self):
        self.template_and_pool(replicas=1)

        def pool_ready():
            pool = self.get("sandboxwarmpools", "pool", a.EXTENSIONS_GROUP)
            return pool if (pool.get("status") or {}).get("readyReplicas") == 1 else None

        pool = self.cluster.wait("the warm pool to be ready", pool_ready)
        self.assertEqual(pool["status"]["selector"], a.WARM_POOL_LABEL + "=" + a.name_hash("pool"))
        warm = [s for s in self.custom.list_namespaced_custom_object(a.GROUP, a.VERSION, self.ns, "sandboxes")["items"]]
        self.assertEqual(len(warm), 1)
        warm_name = warm[0]["metadata"]["name"]
        self.assertTrue(warm_name.startswith("pool-"), warm_name)

        claim = self.claim("mine")
        c = self.cluster.wait("the claim to be ready", lambda: self.claim_ready("mine"))
        self.assertEqual(c["status"]["sandbox"]["name"], warm_name)
        self.assertEqual(c["metadata"]["annotations"][a.ASSIGNED_SANDBOX_ANNOTATION], warm_name)
        adopted = self.get("sandboxes", warm_name)
        self.assertEqual(c["status"]["sandbox"]["podIPs"], adopted["status"]["podIPs"])
        owner = adopted["metadata"]["ownerReferences"][0]
        self.assertEqual((owner["kind"], owner["uid"]), ("SandboxClaim", claim["metadata"]["uid"]))
        self.assertNotIn(a.WARM_POOL_LABEL, adopted["metadata"]["labels"])
        self.assertEqual(adopted["metadata"]["labels"][a.CLAIM_UID_LABEL], claim["metadata"]["uid"])
        self.cluster.wait("the pod's labels to follow the adoption", lambda: self.core.read_namespaced_pod(
            warm_name, self.ns).metadata.labels.get(a.CLAIM_UID_LABEL) == claim["metadata"]["uid"])

        self.cluster.wait("the pool to refill", lambda: (lambda p: p["status"].get("readyReplicas") == 1 and
                                                         p["status"].get("replicas") == 1)(
            self.get("sandboxwarmpools", "pool", a.EXTENSIONS_GROUP)))
        names = {s["metadata"]["name"] for s in
                 self.custom.list_namespaced_custom_object(a.GROUP, a.VERSION, self.ns, "sandboxes")["items"]}
        self.assertEqual(len(names), 2)

        self.custom.delete_namespaced_custom_object(a.EXTENSIONS_GROUP, a.VERSION, self.ns, "sandboxclaims", "mine")
        self.cluster.wait("the claimed sandbox to go", lambda: self.get("sandboxes", warm_name) is None
                          and self.container(warm_name) not in self.cluster.containers(), 30)

    def test_claim_without_warm_sandbox_gets_cold_one(self):
        self.template_and_pool(replicas=0)
        claim = self.claim("cold")
        self.cluster.wait("the claim to be ready", lambda: self.claim_ready("cold"))
        made = self.get("sandboxes", "cold")
        self.assertEqual(made["metadata"]["labels"][a.LAUNCH_TYPE_LABEL], "cold")
        self.assertEqual(made["metadata"]["ownerReferences"][0]["uid"], claim["metadata"]["uid"])
        self.assertEqual(made["spec"]["podTemplate"]["spec"]["automountServiceAccountToken"], False)

    def test_persistent_volume_claim_must_exist_and_outlives_pods(self):
        pod = busybox("echo kept > /data/file; exec sleep 600", volumeMounts=[{"name": "d", "mountPath": "/data"}])
        pod["volumes"] = [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]
        self.create("sandboxes", sandbox("first", pod))
        scheduled = self.cluster.wait("PodScheduled False", lambda: (lambda c: c if c and c["status"] == "False"
                                      else None)(a.find_condition((self.get("sandboxes", "first").get("status") or {})
                                                                  .get("conditions"), "PodScheduled")))
        self.assertEqual(scheduled["reason"], "Unschedulable")
        self.assertIn('persistentvolumeclaim "data" not found', scheduled["message"])
        self.core.create_namespaced_persistent_volume_claim(self.ns, {
            "metadata": {"name": "data"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
        self.ready_sandbox("first")
        self.custom.delete_namespaced_custom_object(a.GROUP, a.VERSION, self.ns, "sandboxes", "first")
        self.cluster.wait("the first pod to go", lambda: "Pod/first" not in self.cluster.objects(self.ns))
        again = busybox("exec sleep 600", volumeMounts=pod["containers"][0]["volumeMounts"])
        again["volumes"] = pod["volumes"]
        self.create("sandboxes", sandbox("second", again))
        self.ready_sandbox("second")
        out = fake_node.podman("exec", self.container("second"), "/bin/busybox", "cat", "/data/file")
        self.assertEqual(out.stdout, "kept\n")
        self.core.delete_namespaced_persistent_volume_claim("data", self.ns)
        time.sleep(1.5)
        self.assertIn("PersistentVolumeClaim/data", self.cluster.objects(self.ns))  # in use: protected
        self.custom.delete_namespaced_custom_object(a.GROUP, a.VERSION, self.ns, "sandboxes", "second")
        self.cluster.wait("everything to go", lambda: self.cluster.objects(self.ns) == [], 30)

    def test_volume_claim_templates_make_claims_the_sandbox_owns(self):
        pod = busybox("exec sleep 600", volumeMounts=[{"name": "work", "mountPath": "/work"}])
        made = self.create("sandboxes", sandbox("vct", pod, volumeClaimTemplates=[{
            "metadata": {"name": "work"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]))
        self.ready_sandbox("vct")
        pvc = self.core.read_namespaced_persistent_volume_claim("work-vct", self.ns)
        self.assertEqual(pvc.metadata.owner_references[0].uid, made["metadata"]["uid"])
        self.assertEqual(self.core.read_namespaced_pod("vct", self.ns).spec.volumes[0].persistent_volume_claim.claim_name,
                         "work-vct")
        self.custom.delete_namespaced_custom_object(a.GROUP, a.VERSION, self.ns, "sandboxes", "vct")
        self.cluster.wait("everything to go", lambda: self.cluster.objects(self.ns) == [], 30)


if __name__ == "__main__":
    unittest.main()
