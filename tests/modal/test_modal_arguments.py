"""Unit tests of gpubox.modal_backend's logic with no Modal at all: how a
create request becomes Modal.Sandbox.create's parameters (a stand-in records
the SDK calls the builder makes), the agent's config as a secret, refusals,
and the module's command line. Interpreter: Debian's /usr/bin/python3, which
has no `modal` (so the missing-SDK message is real)."""

import base64
import io
import json
import subprocess
import sys
import unittest
from unittest import mock

from gpubox import modal_backend as backend


class Recorder:
    """A stand-in for the SDK's lazy objects: each call returns a new Recorder naming it."""

    def __init__(self, path="modal"):
        self.path = path

    def __getattr__(self, name):
        return Recorder(self.path + "." + name)

    def __call__(self, *args, **kwargs):
        rendered = ", ".join([repr(a) for a in args] + ["%s=%r" % kv for kv in sorted(kwargs.items())])
        return Recorder("%s(%s)" % (self.path, rendered))

    def __repr__(self):
        return self.path


CONFIG = {"rpc": {"secret_key": "S" * 40, "authorized_keys": ["C" * 40]}, "lifecycle": {"timeout_seconds": 120}}


def request(**fields):
    base = {"agent": "/opt/gpubox/gpubox-agent", "agent_config": CONFIG, "gpubox_id": "0123456789ab"}
    base.update(fields)
    return base


class SandboxArgumentsTest(unittest.TestCase):

    def test_every_flag_maps_to_its_parameter(self):
        args, kwargs, notes = backend.sandbox_arguments(request(
            image="nvcr.io/nvidia/pytorch:24.05-py3", gpu="H100:2", cpu=4, memory_mib=16384, timeout_s=119.2,
            region="us-east,us-west", volumes=[{"name": "weights", "path": "/weights"}], modal_secrets=["hf"],
            network="allow", cidrs=["10.0.0.0/8"], name="run-1", tags={"team": "interp"}, env={"MODE": "fast"}),
            Recorder())
        self.assertEqual(args, ("/usr/local/bin/gpubox-agent",))
        self.assertEqual(repr(kwargs["image"]),
                         "modal.Image.from_registry('nvcr.io/nvidia/pytorch:24.05-py3')"
                         ".add_local_file('/opt/gpubox/gpubox-agent', '/usr/local/bin/gpubox-agent', copy=True)"
                         ".entrypoint([]).workdir('/workspace').env({'HOME': '/workspace'})")
        self.assertEqual(kwargs["unencrypted_ports"], [7000])
        self.assertEqual((kwargs["gpu"], kwargs["cpu"], kwargs["memory"], kwargs["timeout"]), ("H100:2", 4.0, 16384, 120))
        self.assertEqual(kwargs["region"], ["us-east", "us-west"])
        self.assertEqual({k: repr(v) for k, v in kwargs["volumes"].items()},
                         {"/weights": "modal.Volume.from_name('weights', create_if_missing=True)"})
        self.assertEqual(repr(kwargs["secrets"][1]), "modal.Secret.from_name('hf')")
        self.assertEqual(kwargs["outbound_cidr_allowlist"], ["10.0.0.0/8"])
        self.assertNotIn("block_network", kwargs)
        self.assertEqual(kwargs["tags"], {"team": "interp", "gpubox.sandbox": "0123456789ab"})
        self.assertEqual((kwargs["name"], kwargs["env"]), ("run-1", {"MODE": "fast"}))
        self.assertNotIn("idle_timeout", kwargs)  # gpubox's idle timeout is the agent's watchdog
        self.assertIn("outbound_cidr_allowlist", notes["network"])

    def test_defaults(self):
        args, kwargs, notes = backend.sandbox_arguments(request(), Recorder())
        self.assertIn("from_registry('%s')" % backend.DEFAULT_IMAGE, repr(kwargs["image"]))
        self.assertEqual(sorted(kwargs), ["image", "outbound_cidr_allowlist", "secrets", "tags", "unencrypted_ports"])
        self.assertEqual(kwargs["outbound_cidr_allowlist"], [])  # no network unless asked for by name
        self.assertIn("none", notes["network"])
        _, kwargs, notes = backend.sandbox_arguments(request(network="open"), Recorder())
        self.assertNotIn("outbound_cidr_allowlist", kwargs)
        self.assertEqual(notes["network"], "open (Modal's default outbound network)")

    def test_network_none_is_an_empty_allowlist_not_block_network(self):
        _, kwargs, notes = backend.sandbox_arguments(request(network="none"), Recorder())
        self.assertEqual(kwargs["outbound_cidr_allowlist"], [])
        self.assertNotIn("block_network", kwargs)  # Modal refuses it with open ports, and the tunnel is one
        self.assertIn("block_network", notes["network"])

    def test_the_agent_config_travels_only_inside_the_secret(self):
        _, kwargs, _ = backend.sandbox_arguments(request(), Recorder())
        secret = repr(kwargs["secrets"][0])
        self.assertTrue(secret.startswith("modal.Secret.from_dict({'GPUBOX_CONFIG': '"))
        encoded = secret.split("'")[3]
        self.assertEqual(json.loads(base64.b64decode(encoded)), CONFIG)
        for key, value in kwargs.items():
            if key != "secrets":
                self.assertNotIn("S" * 40, repr(value), key)

    def test_from_snapshot_uses_the_snapshots_image(self):
        _, kwargs, notes = backend.sandbox_arguments(request(from_snapshot="im-123"), Recorder())
        self.assertEqual(repr(kwargs["image"]), "modal.Image.from_id('im-123')"
                         ".add_local_file('/opt/gpubox/gpubox-agent', '/usr/local/bin/gpubox-agent', copy=True)"
                         ".entrypoint([]).workdir('/workspace').env({'HOME': '/workspace'})")
        self.assertEqual(notes["image"], "im-123")

    def test_bad_fields_are_refused_by_name(self):
        for fields, named in (({"agent": "relative/agent"}, "agent"), ({"agent_config": []}, "agent_config"),
                              ({"timeout_s": 0}, "timeout_s"), ({"timeout_s": 90000}, "timeout_s"),
                              ({"network": "bridge"}, "network"), ({"network": "allow", "cidrs": []}, "cidrs"),
                              ({"volumes": [{"name": "w", "path": "rel"}]}, "volumes"),
                              ({"env": {"A": 1}}, "env"), ({"modal_secrets": [""]}, "modal_secrets")):
            with self.assertRaises(backend.BackendError) as caught:
                backend.sandbox_arguments(request(**fields), Recorder())
            self.assertEqual(caught.exception.code, "usage")
            self.assertTrue(caught.exception.message.startswith(named + ":"), caught.exception.message)


class CommandLineTest(unittest.TestCase):

    def run_main(self, argv, stdin):
        out = io.StringIO()
        with mock.patch("sys.stdin", io.StringIO(stdin)), mock.patch("sys.stdout", out):
            code = backend.main(argv)
        return code, json.loads(out.getvalue())

    def test_unknown_command_and_bad_json(self):
        code, result = self.run_main(["explode"], "{}")
        self.assertEqual((code, result["error"]["code"]), (2, "usage"))
        code, result = self.run_main(["create"], "{not json")
        self.assertEqual(code, 2)
        self.assertIn("not JSON", result["error"]["message"])

    def test_without_the_sdk_it_says_what_to_install(self):
        try:
            import modal  # noqa: F401
            self.skipTest("this Python has modal")
        except ImportError:
            pass
        code, result = self.run_main(["create"], json.dumps(request()))
        self.assertEqual(code, 2)
        self.assertIn("pip install 'modal>=1.6,<1.7'", result["error"]["message"])

    def test_as_a_module_a_request_that_is_no_object_is_refused(self):
        ran = subprocess.run([sys.executable, "-m", "gpubox.modal_backend", "info"], input="[]", capture_output=True,
                             text=True, timeout=60)
        self.assertEqual(ran.returncode, 2)
        self.assertIn("JSON object", json.loads(ran.stdout)["error"]["message"])


if __name__ == "__main__":
    unittest.main()
