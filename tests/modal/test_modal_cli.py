"""The Modal backend through the real CLI, the real SDK (unmodified) and the
fake Modal control plane whose sandboxes are real podman containers running
the real agent as PID 1 (modal_harness.py). Interpreter: build/venv/bin/python
(the SDK is in the venv only)."""

import base64
import json
import os
import stat
import subprocess
import sys
import time
import unittest

import zmq

from modal_harness import IMAGE, VENV_PYTHON, ModalTestCase, podman, stop_shared_fake

SECRET_VALUE = "tok-7f3a9c-never-in-argv"


def tearDownModule():
    stop_shared_fake()


class ModalSandboxTest(ModalTestCase):
    """A sandbox's life: create, exec, files, kernel, jobs, terminate, dead."""

    def test_create_exec_files_kernel_job_terminate(self):
        started = time.monotonic()
        sandbox = self.create("--name", "life", "--timeout", "300")
        create_s = time.monotonic() - started
        info = self.record(sandbox)
        self.assertEqual(info["backend"], "modal")
        self.assertEqual(info["state"], "running")
        self.assertTrue(info["spec"]["modal_id"].startswith("sb-"))
        self.assertEqual(info["spec"]["app"], "gpubox")
        self.assertEqual(info["endpoint"], "tcp://" + info["spec"]["modal"]["tunnel"])
        self.assertEqual(info["agent"]["components"]["rpc"]["state"], "ready")
        # The store holds the client's keys, readable by the owner only.
        record_dir = os.path.join(self.env["XDG_STATE_HOME"], "gpubox", "sandboxes", sandbox)
        self.assertEqual(stat.S_IMODE(os.stat(os.path.join(record_dir, "client_keys.json")).st_mode), 0o600)
        self.assertEqual(stat.S_IMODE(os.stat(os.path.join(record_dir, "sandbox.json")).st_mode), 0o600)

        # The agent is PID 1 of the sandbox, in /workspace.
        self.assertEqual(self.ok("exec", sandbox, "--", "sh", "-c", "cat /proc/1/comm; pwd").split(),
                         ["gpubox-agent", "/workspace"])
        ran = self.gpubox("exec", sandbox, "--", "sh", "-c", "exit 7")
        self.assertEqual(ran.returncode, 7)

        local = os.path.join(self.work, "up.txt")
        with open(local, "w") as f:
            f.write("through the tunnel\n")
        self.ok("put", sandbox, local, "up.txt")
        self.assertEqual(self.ok("exec", sandbox, "--", "cat", "up.txt"), "through the tunnel\n")
        back = os.path.join(self.work, "down.txt")
        self.ok("get", sandbox, "up.txt", back)
        with open(back) as f:
            self.assertEqual(f.read(), "through the tunnel\n")

        # The Python client reaches it from the store's record too (tcp + CURVE keys).
        ping = subprocess.run([VENV_PYTHON, "-c", "import gpubox, sys; print(gpubox.connect(sys.argv[1]).call('sys.ping'))",
                               "life"], env=self.env, capture_output=True, text=True, timeout=60)
        self.assertIn("'pong': True", ping.stdout, ping.stderr)

        cell = json.loads(self.ok("run-code", sandbox, "x = 6 * 7\nprint(x)", "--json"))
        self.assertEqual((cell["status"], cell["stdout"]), ("ok", "42\n"))

        job = self.ok("submit", sandbox, "--", "mkdir -p out && echo result > out/r.txt").strip()
        self.ok("wait", sandbox, job, "--timeout", "60")
        outputs = os.path.join(self.work, "job-out")
        self.ok("result", sandbox, job, "--out", outputs)
        with open(os.path.join(outputs, "out", "r.txt")) as f:
            self.assertEqual(f.read(), "result\n")

        # terminate: the agent shuts down by itself (exit 0, not killed), then Modal's sandbox is gone.
        container = self.container_of(sandbox)
        done = json.loads(self.ok("terminate", sandbox, "--json"))
        self.assertEqual(done[0]["id"], sandbox)
        self.assertFalse(done[0]["killed"])
        self.assertEqual(podman("inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", container).stdout.split(),
                         ["exited", "0"])
        self.assertNotIn(sandbox, self.store_ids())
        print("create to ready: %.2f s" % create_s, file=sys.stderr)

    def test_network_none_is_an_empty_allowlist(self):
        sandbox = self.create()
        definition = self.fake.definitions()[-1]
        self.assertEqual(definition["network"], {"type": 3, "cidrs": []})  # ALLOWLIST with no CIDR
        self.assertFalse(definition["block_network"])
        self.assertEqual(definition["ports"], [{"port": 7000, "unencrypted": True}])
        self.assertEqual(definition["timeout_secs"], 3600)
        self.assertEqual(definition["entrypoint_args"], ["/usr/local/bin/gpubox-agent"])
        self.assertIn("outbound_cidr_allowlist=[]", self.ok("info", sandbox))
        self.ok("terminate", sandbox)

    def test_dead_after_a_terminate_from_outside(self):
        sandbox = self.create("--name", "outside")
        modal_id = self.record(sandbox)["spec"]["modal_id"]
        # As from Modal's dashboard: the SDK itself, from another process.
        subprocess.run([VENV_PYTHON, "-c", "import modal, sys; modal.Sandbox.from_id(sys.argv[1]).terminate()", modal_id],
                       env=self.env, check=True, capture_output=True, timeout=120)
        listed = {r["id"]: r for r in json.loads(self.ok("ls", "--json"))}
        self.assertEqual(listed[sandbox]["state"], "dead")
        self.assertEqual(listed[sandbox]["ended"]["reason"], "ended_on_modal")
        self.assertIn("dead (ended on modal)", self.ok("ls"))
        ran = self.gpubox("exec", sandbox, "--", "true")
        self.assertEqual(ran.returncode, 3)
        self.assertIn("is dead: Modal ended it", ran.stderr)
        done = json.loads(self.ok("terminate", sandbox, "--json"))
        self.assertEqual(done[0]["was"], "dead")
        self.assertNotIn(sandbox, self.store_ids())

    def test_adopt_after_the_record_is_lost(self):
        sandbox = self.create("--name", "lost")
        info = self.record(sandbox)
        record_dir = os.path.join(self.env["XDG_STATE_HOME"], "gpubox", "sandboxes", sandbox)
        with open(os.path.join(record_dir, "client_keys.json")) as f:
            keys = json.load(f)
        keys["server_key"] = info["spec"]["server_key"]
        keys_file = os.path.join(self.work, "lost-keys.json")
        with open(keys_file, "w") as f:
            json.dump(keys, f)
        subprocess.run(["rm", "-rf", record_dir], check=True)  # as after a host restart with a fresh store
        public, secret = zmq.curve_keypair()  # a key pair the agent does not know: refused at once
        bad = dict(keys, public_key=public.decode(), secret_key=secret.decode())
        with open(keys_file + ".bad", "w") as f:
            json.dump(bad, f)
        ran = self.gpubox("adopt", info["spec"]["modal_id"], "--keys", keys_file + ".bad")
        self.assertEqual(ran.returncode, 3, ran.stderr)
        self.assertIn("refused this client's key", ran.stderr)
        self.assertEqual(self.store_ids(), [])
        adopted = json.loads(self.ok("adopt", info["spec"]["modal_id"], "--keys", keys_file, "--name", "found", "--json"))
        self.assertEqual(adopted["modal_id"], info["spec"]["modal_id"])
        self.assertEqual(self.ok("exec", "found", "--", "echo", "back"), "back\n")
        ran = self.gpubox("adopt", info["spec"]["modal_id"], "--keys", keys_file)
        self.assertEqual(ran.returncode, 2)
        self.assertIn("in the store already", ran.stderr)
        self.ok("terminate", "found")

    def test_snapshot_and_restore(self):
        sandbox = self.create("--name", "source", "--timeout", "600", "--tag", "team=interp")
        self.ok("exec", sandbox, "--", "sh", "-c", "echo kept > /workspace/kept.txt && mkdir -p /opt/tool && echo t > /opt/tool/t")
        taken = json.loads(self.ok("snapshot", sandbox, "--name", "snap1", "--json"))
        self.assertEqual((taken["kind"], taken["backend"]), ("modal_image", "modal"))
        self.assertTrue(taken["image"].startswith("im-"))
        self.assertIn("TaskSnapshotFilesystem", self.fake.calls())  # through the SDK's task command router
        restored = json.loads(self.ok("--json", "create", "--from-snapshot", "snap1", "--name", "restored"))["id"]
        self.assertEqual(self.ok("exec", restored, "--", "cat", "/workspace/kept.txt", "/opt/tool/t"), "kept\nt\n")
        self.assertEqual(self.ok("exec", restored, "--", "cat", "/proc/1/comm"), "gpubox-agent\n")
        info = self.record(restored)
        self.assertEqual((info["spec"]["timeout_s"], info["spec"]["tags"]), (600, {"team": "interp"}))
        self.assertEqual(info["spec"]["modal"]["image"], taken["image"])
        self.ok("terminate", sandbox, restored)
        self.ok("snapshots", "rm", "snap1")

    def test_ls_remote_lists_the_apps_sandboxes_by_tag(self):
        sandbox = self.create("--app", "gpubox-remote-test")
        modal_id = self.record(sandbox)["spec"]["modal_id"]
        rows = json.loads(self.ok("ls", "--remote", "--app", "gpubox-remote-test", "--json"))
        self.assertIn({"modal_id": modal_id, "gpubox_id": sandbox, "in_store": True,
                       "tags": {"gpubox.sandbox": sandbox}}, rows)
        self.assertEqual(json.loads(self.ok("ls", "--remote", "--app", "another-app", "--json")), [])
        self.ok("terminate", sandbox)


class ModalFlagsAndSecretsTest(ModalTestCase):
    """Every create flag reaches the SDK as its parameter; no secret value in any argv, store file or log."""

    def test_flags_and_secrets(self):
        argv_log = os.path.join(self.work, "python-argv")
        wrapper = os.path.join(self.work, "python-wrapper")
        with open(wrapper, "w") as f:  # records the argv the CLI gives the backend's Python
            f.write('#!/bin/sh\nprintf "%%s\\n" "$@" >> %s\nexec %s "$@"\n' % (argv_log, VENV_PYTHON))
        os.chmod(wrapper, 0o755)
        env = dict(self.env, TOKEN=SECRET_VALUE, GPUBOX_PYTHON=wrapper)
        sandbox = self.create("--name", "flagged", "--gpu", "A100-80GB:2", "--cpu", "1.5", "--memory", "768",
                              "--timeout", "120", "--idle-timeout", "90", "--region", "us-east,eu-west",
                              "--tag", "team=interp", "--volume", "weights:/weights",
                              "--network", "allow:10.0.0.0/8,192.168.0.0/16", "--secret", "TOKEN",
                              "--modal-secret", "shared", "--env", "MODE=fast", "--app", "gpubox-flags", env=env)
        d = self.fake.definitions()[-1]
        self.assertEqual(d["gpu"], {"type": "A100-80GB", "count": 2})
        self.assertEqual((d["milli_cpu"], d["memory_mb"], d["timeout_secs"]), (1500, 768, 120))
        self.assertEqual(d["regions"], ["us-east", "eu-west"])
        self.assertEqual(d["network"], {"type": 3, "cidrs": ["10.0.0.0/8", "192.168.0.0/16"]})
        self.assertEqual(d["volumes"], {"/weights": "vo-weights"})
        self.assertEqual(d["tags"], {"gpubox.sandbox": sandbox, "team": "interp"})
        self.assertEqual(d["secret_names"], ["GPUBOX_CONFIG", "SHARED_KEY"])
        self.assertEqual(d["name"], "flagged")
        self.assertEqual(d["idle_timeout_secs"], 0)  # the agent's own idle watchdog, not Modal's
        self.assertIn("SandboxCreate", self.fake.calls())  # a GPU takes the SDK's V1 path

        info = self.record(sandbox)
        self.assertEqual(info["spec"]["gpu"], "A100-80GB:2")
        self.assertEqual(info["spec"]["timeout_s"], 120)
        self.assertEqual(info["spec"]["secrets"], ["TOKEN"])
        self.assertEqual(info["agent"]["lifecycle"]["timeout_s"], 120)  # the agent's own deadline
        text = self.ok("info", sandbox)
        for line in ("gpu:         A100-80GB:2", "region:      us-east,eu-west", "(raw TCP, CURVE-secured)"):
            self.assertIn(line, text)

        # In the sandbox: the secret and the Modal secret as env, the agent's config gone from children.
        env_text = self.ok("exec", sandbox, "--", "env")
        self.assertIn("TOKEN=" + SECRET_VALUE, env_text)
        self.assertIn("SHARED_KEY=shared-value-31337", env_text)
        self.assertIn("MODE=fast", env_text)
        self.assertNotIn("GPUBOX_CONFIG", env_text)
        self.ok("exec", sandbox, "--", "sh", "-c", "echo kept > /weights/w.txt")
        with open(os.path.join(self.fake.volumes_dir, "weights", "w.txt")) as f:
            self.assertEqual(f.read(), "kept\n")

        # No secret value (the user's, or the agent's key material in GPUBOX_CONFIG) in any argv or log.
        config_b64 = None
        container = self.container_of(sandbox)
        pid = podman("inspect", "--format", "{{.State.Pid}}", container).stdout.strip()
        with open("/proc/%s/cmdline" % pid, "rb") as f:
            cmdline = f.read().decode()
        # Modal's side: the config is a secret, the container's env (the agent's at its start).
        for entry in json.loads(podman("inspect", "--format", "{{json .Config.Env}}", container).stdout):
            if entry.startswith("GPUBOX_CONFIG="):
                config_b64 = entry[len("GPUBOX_CONFIG="):]
        self.assertIsNotNone(config_b64)
        with open("/proc/%s/environ" % pid, "rb") as f:  # the agent overwrote it once it had read it
            agent_environ = f.read().decode(errors="replace")
        agent_config = json.loads(base64.b64decode(config_b64))
        server_secret = agent_config["rpc"]["secret_key"]
        self.assertEqual(agent_config["lifecycle"]["timeout_seconds"], 120)
        self.assertEqual(agent_config["lifecycle"]["idle_timeout_seconds"], 90)
        with open(argv_log) as f:
            python_argv = f.read()
        self.assertIn("gpubox.modal_backend", python_argv)
        logs = podman("logs", container)
        # Sandbox code may not read PID 1's environment or memory (the agent is not dumpable).
        probe = self.gpubox("exec", sandbox, "--", "sh", "-c", "cat /proc/1/environ; cat /proc/1/cmdline; "
                            "head -c 65536 /proc/1/mem; grep -rs secret_key /run /workspace /tmp; true")
        self.assertIn("/proc/1/environ: Permission denied", probe.stderr)
        self.assertIn("'/proc/1/mem' for reading: Permission denied", probe.stderr)
        places = {"the agent's cmdline": cmdline, "the backend's python argv": python_argv,
                  "the agent's environment after start": agent_environ,
                  "what sandbox code reads of PID 1 and its files": probe.stdout + probe.stderr,
                  "the fake's call log (podman argv included)": "\n".join(self.fake.calls()),
                  "the agent's log": logs.stdout + logs.stderr}
        store = os.path.join(self.env["XDG_STATE_HOME"], "gpubox")
        for root, _, files in os.walk(store):
            for name in files:
                with open(os.path.join(root, name), errors="replace") as f:
                    places["store file " + name] = f.read()
        for where, text in places.items():
            self.assertNotIn(SECRET_VALUE, text, where)
            self.assertNotIn(server_secret, text, where)
            self.assertNotIn(config_b64, text, where)
        self.ok("terminate", sandbox)


class ModalFailuresTest(ModalTestCase):
    """Create failures say what went wrong and leave nothing running and nothing in the store."""

    def assert_nothing_left(self, before):
        self.assertEqual(self.store_ids(), [])
        self.assertEqual({k: v for k, v in self.fake.containers(running_only=True).items() if k not in before}, {})

    def test_missing_token(self):
        before = self.fake.containers()
        env = {k: v for k, v in self.env.items() if k not in ("MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET")}
        calls = len(self.fake.calls())
        ran = self.gpubox("create", "--backend", "modal", "--image", IMAGE, env=env)
        self.assertEqual(ran.returncode, 2, ran.stderr)
        self.assertIn("no Modal token is configured: run `modal token new`", ran.stderr)
        self.assertEqual(self.fake.calls()[calls:], [])  # refused before any call to Modal
        self.assert_nothing_left(before)

    def test_missing_modal_package(self):
        bare = "/usr/bin/python3"  # Debian's: pyzmq and msgpack, no modal
        if subprocess.run([bare, "-c", "import modal"], capture_output=True).returncode == 0:
            self.skipTest("%s has modal" % bare)
        before = self.fake.containers()
        ran = self.gpubox("create", "--backend", "modal", "--image", IMAGE, env=dict(self.env, GPUBOX_PYTHON=bare))
        self.assertEqual(ran.returncode, 2, ran.stderr)
        self.assertIn("pip install 'modal>=1.6,<1.7'", ran.stderr)
        self.assert_nothing_left(before)

    def test_bad_flags_are_refused_before_modal(self):
        before = self.fake.containers()
        for args, words in ((["--gpu", "H100:99"], "--gpu"), (["--volume", "w:relative"], "--volume"),
                            (["--network", "bridge"], "--network"), (["--mount", "/tmp:/x"], "--mount"),
                            (["--tag", "novalue"], "--tag"), (["--timeout", "100000"], "--timeout")):
            ran = self.gpubox("create", "--backend", "modal", *args)
            self.assertEqual(ran.returncode, 2, args)
            self.assertIn(words, ran.stderr)
        ran = self.gpubox("create", "--region", "us-east")
        self.assertIn("--region: only with --backend modal", ran.stderr)
        self.assert_nothing_left(before)

    def test_agent_that_exits_at_start(self):
        before = self.fake.containers()
        bad = os.path.join(self.work, "bad.json")
        with open(bad, "w") as f:
            json.dump({"bogus": 1}, f)  # the agent refuses its config and exits 2
        started = time.monotonic()
        ran = self.gpubox("create", "--backend", "modal", "--image", IMAGE, "--config", bad)
        self.assertEqual(ran.returncode, 3, ran.stderr)
        self.assertLess(time.monotonic() - started, 60)
        self.assertIn("exited with status 2 before it was ready", ran.stderr)
        self.assert_nothing_left(before)


class ModalTunnelNeverAnswersTest(ModalTestCase):
    """A tunnel whose far end never answers: create fails within its timeout and terminates what it started."""

    blackhole = True

    def test_create_gives_up_and_terminates(self):
        started = time.monotonic()
        ran = self.gpubox("create", "--backend", "modal", "--image", IMAGE, "--ready-timeout", "3")
        elapsed = time.monotonic() - started
        self.assertEqual(ran.returncode, 3, ran.stderr)
        self.assertIn("did not answer sys.ping", ran.stderr)
        self.assertIn("within 3 s", ran.stderr)
        # Well under the 120 s default: --ready-timeout held (the rest is the SDK's start and the agent upload, slow under load).
        self.assertLess(elapsed, 100)
        self.assertIn("SandboxTerminate", self.fake.calls())
        self.assertEqual(self.fake.containers(running_only=True), {})
        self.assertEqual(self.store_ids(), [])


class ModalUsageTest(ModalTestCase):
    """gpubox usage of a Modal sandbox: the agent's seconds beside the resources requested, to price a run."""

    def test_usage_shows_the_requested_resources(self):
        started = time.monotonic()
        sandbox = self.create("--gpu", "H100:2", "--cpu", "4", "--memory", "8192", "--timeout", "300")
        job = self.ok("submit", sandbox, "--", "sleep 0.3").strip()
        self.ok("wait", sandbox, job, "--timeout", "60")
        report = json.loads(self.ok("usage", sandbox, "--json"))
        self.assertEqual((report["id"], report["backend"], report["state"]), (sandbox, "modal", "running"))
        requested = report["requested"]
        self.assertEqual(requested["gpu"], {"type": "H100", "count": 2})
        self.assertEqual((requested["cpu"], requested["memory_mib"], requested["timeout_s"]), (4, 8192, 300))
        self.assertIsNone(requested["region"])
        self.assertEqual(requested["enforced_by"]["cpu"], "Modal (cpu=)")
        usage = report["usage"]
        self.assertGreater(usage["container_s"], 0)
        self.assertLessEqual(usage["container_s"], time.monotonic() - started)
        # The fake runs the sandbox as a plain container: no GPU device in it, so none is counted as allocated.
        self.assertEqual(usage["gpus"]["count"], 0)
        self.assertEqual(usage["gpu_s"], 0)
        self.assertEqual([j["job_id"] for j in usage["jobs"]], [job])
        self.assertGreaterEqual(usage["jobs"][0]["wall_s"], 0.25)
        self.assertLess(usage["jobs"][0]["cpu_s"], 0.2)
        # In the agent's container the cgroup is the sandbox's own.
        self.assertIsNotNone(usage["cgroup"])
        text = self.ok("usage", sandbox)
        self.assertIn("gpu 2 x H100, cpu 4, memory 8192 MiB, timeout 300 s, region any", text)
        self.assertIn(job, text)
        self.assertIn("usage", self.record(sandbox))
        self.ok("terminate", sandbox)
        gone = self.gpubox("usage", sandbox)
        self.assertEqual(gone.returncode, 2, gone.stderr)


if __name__ == "__main__":
    unittest.main()
