"""SandboxConfig, ModelConfig, RepoConfig, Library and Workspace validation, the
`gpubox create` plan a config becomes (python/gpubox/plan.py), and where the
CLI is found: pure logic, no sandbox. A bad value raises ValueError naming the
field, and Sandbox.start then creates nothing.

Run by ctest (python_api_config) with Debian's /usr/bin/python3; no root needed.
"""
import glob
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest
import zipfile

import gpubox
from gpubox import plan
from gpubox.cli_path import find_cli
from gpubox.config import hf_cache_path, memory_mib
from local_sandboxes import PrivateState


class BadValuesTest(unittest.TestCase):
    def assert_refused(self, field, make):
        with self.assertRaises(ValueError) as raised:
            make()
        self.assertIn(field, str(raised.exception))
        return str(raised.exception)

    def test_each_sandbox_field_is_checked(self):
        cases = {
            "SandboxConfig.backend": dict(backend="nomad"),
            "SandboxConfig.gpu": dict(gpu=3),
            "SandboxConfig.gpu_count": dict(gpu="A100", gpu_count=0),
            "SandboxConfig.cpu": dict(cpu=-1),
            "SandboxConfig.memory": dict(memory="lots"),
            "SandboxConfig.timeout": dict(timeout="1h"),
            "SandboxConfig.idle_timeout": dict(idle_timeout=10 ** 9),
            "SandboxConfig.env": dict(env={"1BAD": "x"}),
            "SandboxConfig.env['A']": dict(env={"A": 3}),
            "SandboxConfig.secrets": dict(secrets="HF_TOKEN"),
            "SandboxConfig.models": dict(models=["gpt2"]),
            "SandboxConfig.python_packages": dict(python_packages=[""]),
            "SandboxConfig.system_packages": dict(system_packages=["git; rm -rf /"]),
            "SandboxConfig.repos": dict(repos=["owner/repo"]),
            "SandboxConfig.local_files[0]": dict(local_files=[("a.txt", "relative/a.txt")]),
            "SandboxConfig.local_dirs": dict(local_dirs="dir"),
            "SandboxConfig.image": dict(image="gpubox:latest"),
            "SandboxConfig.volumes": dict(volumes={"data": "/tmp"}),
            "SandboxConfig.python": dict(python=""),
            "SandboxConfig.network": dict(python_packages=["numpy"]),
        }
        for field, values in cases.items():
            with self.subTest(field=field):
                self.assert_refused(field, lambda: gpubox.SandboxConfig(**values))

    def test_what_modal_refuses_names_the_field(self):
        cases = {
            "SandboxConfig.gpu": dict(gpu="H100:2"),  # the count is gpu_count
            "SandboxConfig.gpu_count": dict(gpu="H100", gpu_count=9),
            "SandboxConfig.timeout": dict(timeout=None),
            "SandboxConfig.timeout ": dict(timeout=86401),
            "SandboxConfig.idle_timeout": dict(idle_timeout=90000),
            "SandboxConfig.models": dict(models=[gpubox.ModelConfig("gpt2", path="/tmp")]),
            "RepoConfig('/tmp').url": dict(repos=[gpubox.RepoConfig("/tmp")]),
            "SandboxConfig.volumes['/weights']": dict(volumes={"/weights": "/tmp/weights"}),
            "SandboxConfig.volumes['/w']": dict(volumes={"/w": "weights:ro"}),
            "SandboxConfig.modal_app": dict(modal_app="no spaces"),
            "SandboxConfig.budget": dict(budget="no spaces"),
            "SandboxConfig.budget ": dict(budget=3),
        }
        for field, values in cases.items():
            with self.subTest(field=field):
                self.assert_refused(field.strip(), lambda: gpubox.SandboxConfig(backend="modal", **values))
        self.assert_refused("SandboxConfig.modal_app", lambda: gpubox.SandboxConfig(modal_app="gpubox"))

    def test_what_kubernetes_refuses_names_the_field(self):
        cases = {
            "SandboxConfig.kubernetes": dict(kubernetes={"namespce": "ns"}),
            "SandboxConfig.kubernetes ": dict(kubernetes={"namespace": ""}),
            "SandboxConfig.gpu_count": dict(gpu="A100", gpu_count=65),
            "SandboxConfig.models": dict(models=[gpubox.ModelConfig("gpt2", path="/tmp")]),
            "SandboxConfig.volumes['/w']": dict(volumes={"/w": "/tmp/weights"}),
        }
        for field, values in cases.items():
            with self.subTest(field=field):
                self.assert_refused(field.strip(), lambda: gpubox.SandboxConfig(backend="kubernetes", **values))
        self.assert_refused("SandboxConfig.kubernetes", lambda: gpubox.SandboxConfig(kubernetes={"namespace": "ns"}))

    def test_kubernetes_options_are_create_flags(self):
        config = gpubox.SandboxConfig(backend="kubernetes", image="registry/gpubox:1", gpu="H100", gpu_count=2,
                                      volumes={"/weights": "weights"},
                                      kubernetes={"namespace": "research", "context": "lab", "queue": "gpu"})
        args = plan.plan_create(config).create_args
        self.assertNotIn("--network", args, "the cluster's network: no --network")
        joined = " ".join(args)
        for expected in ("--backend kubernetes", "--image registry/gpubox:1", "--gpu 2", "--volume weights:/weights",
                         "--namespace research", "--context lab", "--queue gpu"):
            self.assertIn(expected, joined)

    def test_model_and_repo_fields(self):
        M = gpubox.ModelConfig
        self.assert_refused("ModelConfig.name", lambda: M(""))
        self.assert_refused("ModelConfig('m').var_name", lambda: M("m", var_name="not valid"))
        self.assert_refused("ModelConfig('m').var_name", lambda: M("m", var_name="model_info"))
        self.assert_refused("ModelConfig('m').base_model", lambda: M("m", is_peft=True))
        self.assert_refused("ModelConfig('m').base_model", lambda: M("m", base_model="/b"))
        self.assert_refused("ModelConfig('m').loader", lambda: M("m", loader="onnx"))
        self.assert_refused("ModelConfig('m').device", lambda: M("m", device="tpu"))
        self.assert_refused("ModelConfig('m').dtype", lambda: M("m", dtype="int4"))
        self.assert_refused("ModelConfig('m').hidden", lambda: M("m", hidden="yes"))
        self.assert_refused("SandboxConfig.models", lambda: gpubox.SandboxConfig(models=[M("a"), M("b")]))
        self.assert_refused("RepoConfig.url", lambda: gpubox.RepoConfig(""))
        self.assert_refused("RepoConfig('o/r').dest", lambda: gpubox.RepoConfig("o/r", dest="here"))
        self.assert_refused("RepoConfig('o/r').branch", lambda: gpubox.RepoConfig("o/r", branch="--upload-pack=x"))

    def test_tokenizer_variables_follow_the_model_variable(self):
        self.assertEqual(gpubox.ModelConfig("m").tokenizer_var, "tokenizer")
        self.assertEqual(gpubox.ModelConfig("m", var_name="gemma").tokenizer_var, "gemma_tokenizer")
        self.assertEqual(gpubox.ModelConfig("m", loader="torchscript").tokenizer_var, "")

    def test_library_and_workspace(self):
        self.assert_refused("Library.name", lambda: gpubox.Library("my-lib", {"x.py": ""}))
        self.assert_refused("Library('lib').files", lambda: gpubox.Library("lib", {"../escape.py": ""}))
        self.assert_refused("Library('lib').files", lambda: gpubox.Library("lib", {"/abs.py": ""}))
        self.assert_refused("Workspace.libraries", lambda: gpubox.Workspace(libraries=["tools.py"]))
        self.assert_refused("Workspace.custom_init_code", lambda: gpubox.Workspace(custom_init_code=3))
        with tempfile.TemporaryDirectory() as scratch:
            self.assert_refused("from_directory", lambda: gpubox.Library.from_directory(scratch))

    def test_memory_sizes(self):
        self.assertEqual([memory_mib("m", v) for v in (512, "512MiB", "16GiB", "2G", "1T")],
                         [512, 512, 16384, 2048, 1 << 20])
        self.assert_refused("m", lambda: memory_mib("m", "1.5MiB"))

    def test_machine_checks_name_what_is_missing(self):
        os.environ.pop("GPUBOX_TEST_UNSET_SECRET", None)
        config = gpubox.SandboxConfig(secrets=["GPUBOX_TEST_UNSET_SECRET"])
        text = self.assert_refused("SandboxConfig.secrets", config.check_local)
        self.assertIn("GPUBOX_TEST_UNSET_SECRET is not set", text)
        self.assert_refused("SandboxConfig.local_files[0]",
                            gpubox.SandboxConfig(local_files=[("/nonexistent/a", "/a")]).check_local)
        self.assert_refused("ModelConfig('m').path", gpubox.SandboxConfig(models=[
            gpubox.ModelConfig("m", path="/nonexistent/model")]).check_local)
        self.assert_refused("ModelConfig('org/not-cached').path", gpubox.SandboxConfig(models=[
            gpubox.ModelConfig("org/not-cached")]).check_local)
        self.assert_refused("RepoConfig('/nonexistent/repo').url",
                            gpubox.SandboxConfig(repos=[gpubox.RepoConfig("/nonexistent/repo")]).check_local)


class NothingStartsTest(unittest.TestCase):
    def setUp(self):
        self.state = PrivateState("gpubox-py-config-")
        self.addCleanup(self.state.end)

    def test_a_bad_config_creates_no_sandbox(self):
        os.environ.pop("GPUBOX_TEST_UNSET_SECRET", None)
        for config in (gpubox.SandboxConfig(secrets=["GPUBOX_TEST_UNSET_SECRET"]),
                       gpubox.SandboxConfig(local_dirs=[("/nonexistent/dir", "/data")])):
            with self.assertRaises(ValueError):
                gpubox.Sandbox(config).start()
        self.assertEqual(gpubox.sandboxes(), [])
        self.assertFalse(os.path.exists(os.path.join(self.state.store, "sandboxes")), "the CLI never ran")


class PlanTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="gpubox-plan-")
        for name in ("adapter", "base", "data", "repo.git", "pkg"):
            os.makedirs(os.path.join(self.dir, name))

    def tearDown(self):
        import shutil
        shutil.rmtree(self.dir, ignore_errors=True)

    assert_refused = BadValuesTest.assert_refused

    def test_every_field_maps_to_the_cli_or_the_agent_config(self):
        os.environ["GPUBOX_TEST_PLAN_SECRET"] = "value"
        d = self.dir
        config = gpubox.SandboxConfig(
            cpu=2, memory="1GiB", timeout=60, idle_timeout=30, env={"A": "1"}, secrets=["GPUBOX_TEST_PLAN_SECRET"],
            models=[gpubox.ModelConfig("secret/adapter", path=d + "/adapter", is_peft=True, base_model=d + "/base",
                                       hidden=True),
                    gpubox.ModelConfig("base", path=d + "/base", var_name="base", dtype="bfloat16")],
            python_packages=[d + "/pkg", "numpy==2.0"], repos=[gpubox.RepoConfig(d + "/repo.git", install=True),
                                                              gpubox.RepoConfig("owner/tool", branch="v1")],
            volumes={"/data": d + "/data:ro"}, python="/usr/bin/python3", network=True)
        made = plan.plan_create(config, name="box")
        self.assertEqual(made.create_args, [
            "--backend", "local", "--name", "box", "--cpu", "2.0", "--memory", "1024", "--timeout", "60.0",
            "--idle-timeout", "30.0", "--network", "host", "--secret", "GPUBOX_TEST_PLAN_SECRET",
            "--mount", d + "/data:/data:ro",
            "--mount", d + "/adapter:/gpubox/models/m0:ro", "--mount", d + "/base:/gpubox/models/m0-base:ro",
            "--mount", d + "/base:/gpubox/models/m1:ro", "--mount", d + "/repo.git:/gpubox/repos/r0:ro"])
        self.assertNotIn("value", " ".join(made.create_args), "a secret's value is never an argument")
        self.assertEqual(made.agent_config, {"env": {"A": "1"}, "kernel": {
            "python": "/usr/bin/python3", "workspace_dir": "/workspace/libraries", "preload": True, "models": [
                {"name": "secret/adapter", "path": "/gpubox/models/m0", "loader": "transformers", "var_name": "model",
                 "tokenizer_var": "tokenizer", "device": "cpu", "dtype": "", "hidden": True, "is_peft": True,
                 "base_model": "/gpubox/models/m0-base"},
                {"name": "base", "path": "/gpubox/models/m1", "loader": "transformers", "var_name": "base",
                 "tokenizer_var": "base_tokenizer", "device": "cpu", "dtype": "bfloat16", "hidden": False,
                 "is_peft": False}]}})
        self.assertEqual([(h.name, h.path, h.local_path) for h in made.handles],
                         [("secret/adapter", "/gpubox/models/m0", d + "/adapter"),
                          ("base", "/gpubox/models/m1", d + "/base")])
        self.assertEqual(plan.package_uploads(config), ([(d + "/pkg", "/workspace/.gpubox/packages/0/pkg")],
                                                        ["/workspace/.gpubox/packages/0/pkg", "numpy==2.0"]))
        self.assertEqual(plan.clone_command(config, 0), ["git", "-c", "safe.directory=*", "clone", "--quiet", "--",
                                                         "/gpubox/repos/r0", "/workspace/repo"])
        self.assertEqual(plan.clone_command(config, 1), ["git", "-c", "safe.directory=*", "clone", "--quiet",
                                                         "--branch", "v1", "--", "https://github.com/owner/tool.git",
                                                         "/workspace/tool"])

    def test_modal_fields_map_to_the_clis_modal_flags(self):
        os.environ["GPUBOX_TEST_PLAN_SECRET"] = "value"
        config = gpubox.SandboxConfig(
            backend="modal", gpu="A100-80GB", gpu_count=2, cpu=1.5, memory="2GiB", timeout=600, idle_timeout=120,
            env={"MODE": "fast"}, secrets=["GPUBOX_TEST_PLAN_SECRET"], volumes={"/weights": "weights", "/data": "d"},
            image="pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime", modal_app="interp", python_packages=["numpy"],
            network=True, budget="lab")
        made = plan.plan_create(config, name="gpu-box")
        self.assertEqual(made.create_args, [
            "--backend", "modal", "--name", "gpu-box", "--image", "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
            "--cpu", "1.5", "--memory", "2048", "--timeout", "600.0", "--idle-timeout", "120.0",
            "--network", "open", "--app", "interp", "--budget", "lab", "--gpu", "A100-80GB:2", "--secret", "GPUBOX_TEST_PLAN_SECRET",
            "--volume", "d:/data", "--volume", "weights:/weights"])
        self.assertNotIn("value", " ".join(made.create_args), "a secret's value is never an argument")
        self.assertEqual(made.agent_config["env"], {"MODE": "fast"})
        # One GPU is the type alone; no packages or repos: no network (an empty outbound allowlist on Modal).
        made = plan.plan_create(gpubox.SandboxConfig(backend="modal", gpu="H100"))
        self.assertEqual(made.create_args, ["--backend", "modal", "--timeout", "3600.0", "--network", "none",
                                            "--gpu", "H100"])

    def test_the_model_host_is_mounted_and_configured(self):
        d = self.dir
        os.makedirs(d + "/sae")
        config = gpubox.SandboxConfig(model_host=[
            gpubox.HostedModel("tiny", d + "/base", saes=[{"name": "res0", "path": d + "/sae", "hook": "blocks.0.hook_resid_post"}]),
            gpubox.HostedModel("big", d + "/adapter", dtype="bfloat16", device="cuda:1", kv_cache_mb=64, max_batch=4,
                               hidden=True)])
        made = plan.plan_create(config)
        self.assertEqual(made.create_args[-6:], ["--mount", d + "/base:/gpubox/hosted/h0:ro",
                                                 "--mount", d + "/sae:/gpubox/hosted/h0-sae0:ro",
                                                 "--mount", d + "/adapter:/gpubox/hosted/h1:ro"])
        self.assertEqual(made.agent_config["model_host"], {"models": [
            {"name": "tiny", "path": "/gpubox/hosted/h0", "device": "cpu", "hidden": False, "cuda_graphs": False,
             "saes": [{"name": "res0", "path": "/gpubox/hosted/h0-sae0", "hook": "blocks.0.hook_resid_post"}]},
            {"name": "big", "path": "/gpubox/hosted/h1", "device": "cuda:1", "hidden": True, "cuda_graphs": False,
             "dtype": "bfloat16", "max_batch": 4, "kv_cache_mb": 64}]})
        self.assertEqual(made.agent_config["model_host"]["models"][0]["device"], "cpu")
        self.assertEqual(plan.plan_create(gpubox.SandboxConfig(gpu="any", model_host=[gpubox.HostedModel("t", d + "/base")]))
                         .agent_config["model_host"]["models"][0]["device"], "cuda", "a sandbox with a GPU hosts on it")
        # An empty list starts a model host without models (model.load later); None (the default) none at all.
        self.assertEqual(plan.plan_create(gpubox.SandboxConfig(model_host=[])).agent_config["model_host"], {"models": []})
        self.assertNotIn("model_host", plan.plan_create(gpubox.SandboxConfig()).agent_config)
        # On Modal the paths are the sandbox's, in its volumes (gpubox model ID pull fills them): nothing is mounted.
        modal = gpubox.SandboxConfig(backend="modal", volumes={"/weights": "weights"}, model_host=[
            gpubox.HostedModel("llama", "/weights/meta-llama/Llama-3.2-1B", device="cuda")])
        made = plan.plan_create(modal)
        self.assertNotIn("--mount", made.create_args)
        self.assertEqual(made.agent_config["model_host"]["models"][0]["path"], "/weights/meta-llama/Llama-3.2-1B")

    def test_model_host_refusals_name_the_field(self):
        d = self.dir
        cases = {
            "HostedModel('t').dtype": lambda: gpubox.HostedModel("t", d, dtype="float64"),
            "HostedModel('t').device": lambda: gpubox.HostedModel("t", d, device="tpu"),
            "HostedModel('t').kv_cache_mb": lambda: gpubox.HostedModel("t", d, kv_cache_mb=0),
            "HostedModel('t').max_batch": lambda: gpubox.HostedModel("t", d, max_batch=5000),
            "HostedModel('t').saes[0]": lambda: gpubox.HostedModel("t", d, saes=[{"name": "s"}]),
            "HostedModel('t').saes[0].hook": lambda: gpubox.HostedModel("t", d, saes=[{"name": "s", "path": d, "hook": 3}]),
            "HostedModel('t').path": lambda: gpubox.HostedModel("t", ""),
            "SandboxConfig.model_host": lambda: gpubox.SandboxConfig(model_host=[gpubox.HostedModel("t", d),
                                                                                 gpubox.HostedModel("t", d)]),
            "SandboxConfig.model_host ": lambda: gpubox.SandboxConfig(model_host=[{"name": "t", "path": d}]),
        }
        for field_name, make in cases.items():
            with self.subTest(field_name):
                with self.assertRaises(ValueError) as raised:
                    make()
                self.assertIn(field_name.strip() + ":", str(raised.exception))
        # What this machine lacks, named before anything runs.
        with self.assertRaisesRegex(ValueError, r"HostedModel\('t'\)\.saes\[0\]\.path: %s/none is not a directory" % d):
            plan.plan_create(gpubox.SandboxConfig(model_host=[gpubox.HostedModel("t", d + "/base", saes=[
                {"name": "s", "path": d + "/none"}])]))
        with self.assertRaisesRegex(ValueError, r"HostedModel\('t'\)\.path: .*with backend 'modal', a path in one of "
                                                r"volumes \(/weights\)"):
            gpubox.SandboxConfig(backend="modal", volumes={"/weights": "w"}, model_host=[gpubox.HostedModel("t", d)])

    def test_a_model_split_across_devices(self):
        d = self.dir
        config = gpubox.SandboxConfig(gpu="any", model_host=[
            gpubox.HostedModel("listed", d + "/base", device="cuda:0,1"),
            gpubox.HostedModel("counted", d + "/base", tensor_parallel=4),
            gpubox.HostedModel("matching", d + "/base", device="cuda:2,3", tensor_parallel=2),
            gpubox.HostedModel("cpu", d + "/base", device="cpu", tensor_parallel=2, allow_cpu_split=True),
            gpubox.HostedModel("one", d + "/base")])
        models = plan.plan_create(config).agent_config["model_host"]["models"]
        self.assertEqual(models[0]["device"], "cuda:0,1")
        self.assertNotIn("tensor_parallel", models[0])  # taken from the list
        self.assertEqual((models[1]["device"], models[1]["tensor_parallel"]), ("cuda", 4))
        self.assertEqual(models[2]["tensor_parallel"], 2)
        self.assertEqual((models[3]["tensor_parallel"], models[3]["allow_cpu_split"]), (2, True))
        for key in ("tensor_parallel", "allow_cpu_split"):
            self.assertNotIn(key, models[4])  # the default: one device, nothing written
        self.assertNotIn("allow_cpu_split", models[1])
        # Without a GPU the model goes to the CPU: a split there needs allow_cpu_split.
        message = self.assert_refused("HostedModel('c').tensor_parallel", lambda: plan.plan_create(gpubox.SandboxConfig(
            model_host=[gpubox.HostedModel("c", d + "/base", tensor_parallel=2)])))
        self.assertIn("allow_cpu_split=True", message)

    def test_split_refusals_name_the_field(self):
        d = self.dir
        for value in (0, 65, -1, 2.0, "2", True):
            with self.subTest(tensor_parallel=value):
                self.assert_refused("HostedModel('t').tensor_parallel", lambda: gpubox.HostedModel("t", d, tensor_parallel=value))
        for value in (1, "yes", None):
            with self.subTest(allow_cpu_split=value):
                self.assert_refused("HostedModel('t').allow_cpu_split", lambda: gpubox.HostedModel("t", d, allow_cpu_split=value))
        for device in ("cuda:0,", "cuda:0, 1", "cuda:,1", "cpu,cpu", "cuda:0;1"):
            with self.subTest(device=device):
                self.assert_refused("HostedModel('t').device", lambda: gpubox.HostedModel("t", d, device=device))
        message = self.assert_refused("HostedModel('t').device", lambda: gpubox.HostedModel("t", d, device="cuda:1,1"))
        self.assertIn("each GPU listed once", message)
        message = self.assert_refused("HostedModel('t').tensor_parallel",
                                      lambda: gpubox.HostedModel("t", d, device="cuda:0,1", tensor_parallel=3))
        self.assertIn("3 does not match device 'cuda:0,1', which lists 2 GPUs", message)
        # The kernel's models load on one device.
        self.assert_refused("ModelConfig('k').device", lambda: gpubox.ModelConfig("k", device="cuda:0,1"))

    def test_load_model_sends_the_split_only_when_given(self):
        sent = []

        class Recording(gpubox.Client):
            def __init__(self):  # no connection: call() records
                pass

            def call(self, method, /, timeout=None, *, params=None, **kwargs):
                sent.append((method, params))
                return {"name": params["name"], "state": "loading"}

        client = Recording()
        client.load_model("a", "/m/a", device="cuda:0,1")
        client.load_model("b", "/m/b", device="cpu", tensor_parallel=2, allow_cpu_split=True)
        client.load_model("c", "/m/c", tensor_parallel=4, allow_cpu_split=False)
        self.assertEqual(sent, [
            ("model.load", {"name": "a", "path": "/m/a", "device": "cuda:0,1"}),
            ("model.load", {"name": "b", "path": "/m/b", "device": "cpu", "tensor_parallel": 2, "allow_cpu_split": True}),
            ("model.load", {"name": "c", "path": "/m/c", "tensor_parallel": 4, "allow_cpu_split": False})])

    def test_network_is_asked_for_by_name(self):
        local = gpubox.SandboxConfig(python_packages=[self.dir + "/pkg"], repos=[gpubox.RepoConfig(self.dir + "/repo.git")])
        self.assertEqual(local.needs_network(), [])
        self.assertIn("--network none", " ".join(plan.plan_create(local).create_args))
        self.assertEqual(plan.pip_command(local, ["/p"]),
                         ["python3", "-m", "pip", "install", "--quiet", "--no-index", "--no-build-isolation", "/p"])
        # Packages by name need the network, which only network=True opens.
        with self.assertRaisesRegex(ValueError, r"SandboxConfig.network: python_packages 'numpy' need the network.*network=True"):
            gpubox.SandboxConfig(python_packages=["numpy"], backend="docker")
        remote = gpubox.SandboxConfig(python_packages=["numpy"], backend="docker", gpu="A100", gpu_count=2, network=True)
        args = " ".join(plan.plan_create(remote).create_args)
        self.assertIn("--network bridge", args)
        self.assertIn("--gpu 2", args, "a container gets a number of GPUs")
        self.assertEqual(plan.pip_command(remote, ["numpy"], editable=True),
                         ["python3", "-m", "pip", "install", "--quiet", "-e", "numpy"])
        self.assertIn("--gpu 0,1", " ".join(plan.plan_create(gpubox.SandboxConfig(gpu="any", gpu_count=2)).create_args))
        self.assertEqual(plan.apt_command(["git", "curl=7.88.1-10"])[-2:], ["git", "curl=7.88.1-10"],
                         "package names are arguments, never shell text")

    def test_a_model_from_the_hugging_face_cache(self):
        snapshot = os.path.join(self.dir, "hub", "models--org--tiny", "snapshots", "abc123")
        os.makedirs(snapshot)
        os.makedirs(os.path.join(self.dir, "hub", "models--org--tiny", "refs"))
        with open(os.path.join(self.dir, "hub", "models--org--tiny", "refs", "main"), "w") as f:
            f.write("abc123\n")
        old = os.environ.get("HF_HUB_CACHE")
        os.environ["HF_HUB_CACHE"] = os.path.join(self.dir, "hub")
        try:
            self.assertEqual(hf_cache_path("org/tiny"), snapshot)
            self.assertEqual(gpubox.ModelConfig("org/tiny").local_path(), os.path.realpath(snapshot))
        finally:
            if old is None:
                os.environ.pop("HF_HUB_CACHE")
            else:
                os.environ["HF_HUB_CACHE"] = old


class PackagingTest(unittest.TestCase):
    def test_pip_builds_and_installs_the_package(self):
        source = os.path.dirname(os.path.dirname(os.path.abspath(gpubox.__file__)))
        with tempfile.TemporaryDirectory() as scratch:
            tree = os.path.join(scratch, "src")
            shutil.copytree(source, tree, ignore=shutil.ignore_patterns("__pycache__"))  # builds leave files behind
            pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
            built = subprocess.run(pip + ["wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
                                          "-w", os.path.join(scratch, "wheels"), tree], capture_output=True, text=True)
            self.assertEqual(built.returncode, 0, built.stderr)
            (wheel,) = glob.glob(os.path.join(scratch, "wheels", "gpubox-*.whl"))
            with zipfile.ZipFile(wheel) as archive:
                names = set(archive.namelist())
                metadata = archive.read([n for n in names if n.endswith(".dist-info/METADATA")][0]).decode()
                entry_points = archive.read([n for n in names if n.endswith(".dist-info/entry_points.txt")][0]).decode()
            modules = {"gpubox/" + n for n in os.listdir(os.path.join(source, "gpubox")) if n.endswith(".py")}
            modules |= {"gpubox/inspect/" + n for n in os.listdir(os.path.join(source, "gpubox", "inspect"))
                        if n.endswith(".py")}
            self.assertLessEqual(modules, names)
            requires = sorted(l.split(":", 1)[1].strip() for l in metadata.splitlines() if l.startswith("Requires-Dist:"))
            self.assertEqual(requires, ["inspect-ai (>=0.3.285) ; extra == 'inspect'",
                                        "kubernetes (>=37) ; extra == 'kubernetes'",
                                        "modal (<1.7,>=1.6) ; extra == 'modal'", "msgpack (>=1.0)",
                                        "numpy ; extra == 'numpy'", "pydantic (>=2) ; extra == 'inspect'",
                                        "pyzmq (>=23)", "torch ; extra == 'torch'"])
            # Inspect finds `--sandbox gpubox` through this entry point (docs/inspect.md).
            self.assertIn("[inspect_ai]\ngpubox = gpubox.inspect._registry", entry_points)
            target = os.path.join(scratch, "site")
            installed = subprocess.run(pip + ["install", "--no-deps", "--no-index", "-q", "--target", target, wheel],
                                       capture_output=True, text=True)
            self.assertEqual(installed.returncode, 0, installed.stderr)
            env = dict(os.environ, PYTHONPATH=target)
            where = subprocess.run([sys.executable, "-c", "import gpubox; print(gpubox.__file__, gpubox.Sandbox)"],
                                   capture_output=True, text=True, env=env, cwd=scratch)
            self.assertEqual(where.returncode, 0, where.stderr)
            self.assertTrue(where.stdout.startswith(os.path.join(target, "gpubox", "__init__.py")), where.stdout)


class CliPathTest(unittest.TestCase):
    def test_env_then_path_then_checkout(self):
        old_env, old_path = os.environ.get("GPUBOX_CLI"), os.environ.get("PATH", "")
        with tempfile.TemporaryDirectory() as d:
            fake = os.path.join(d, "gpubox")
            with open(fake, "w") as f:
                f.write("#!/bin/sh\n")
            os.chmod(fake, stat.S_IRWXU)
            try:
                os.environ["GPUBOX_CLI"] = fake
                self.assertEqual(find_cli(), fake)
                os.environ["GPUBOX_CLI"] = os.path.join(d, "missing")
                with self.assertRaisesRegex(FileNotFoundError, "GPUBOX_CLI="):
                    find_cli()
                del os.environ["GPUBOX_CLI"]
                os.environ["PATH"] = d
                self.assertEqual(find_cli(), fake)
                os.environ["PATH"] = "/nonexistent"
                checkout = os.path.realpath(os.path.join(os.path.dirname(gpubox.__file__), "..", "..",
                                                         "build", "bin", "gpubox"))
                if os.access(checkout, os.X_OK):
                    self.assertEqual(find_cli(), checkout)
                else:
                    with self.assertRaisesRegex(FileNotFoundError, "build"):
                        find_cli()
            finally:
                os.environ["PATH"] = old_path
                if old_env is not None:
                    os.environ["GPUBOX_CLI"] = old_env
                else:
                    os.environ.pop("GPUBOX_CLI", None)


if __name__ == "__main__":
    unittest.main()
