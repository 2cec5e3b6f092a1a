"""Served functions against the real agent and its real Python worker.

The worker runs the same interpreter as this test (kernel.python =
sys.executable): in the venv with torch; on Debian's python3 the client side
runs without torch (GPUBOX_TEST_NO_TORCH), so tensors come back as numpy.
One agent serves interface.py for the whole module; the tests that kill or
break a worker start services of their own.
"""

import builtins
import importlib.util
import inspect
import os
import shutil
import sys
import tempfile
import threading
import time
import unittest

if os.environ.get("GPUBOX_TEST_NO_TORCH"):
    sys.modules["torch"] = None  # Debian's python3 may have torch: the numpy variant runs as if it had not

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
from agent_harness import Agent, wait_until  # noqa: E402

import gpubox  # noqa: E402
from gpubox import served  # noqa: E402

try:
    import torch
except ImportError:
    torch = None
import numpy as np  # noqa: E402

INTERFACE = os.path.join(HERE, "interface.py")
BROKEN = os.path.join(HERE, "broken_interface.py")


def line_of(path, marker):
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if marker in line:
                return number
    raise AssertionError(marker)


def original_functions():
    """interface.py imported here, with a stand-in expose: name → function."""
    found = {}

    def expose(fn=None, *, name=None):
        def mark(f):
            found[name or f.__name__] = f
            return f
        return mark if fn is None else mark(fn)
    builtins.expose = expose
    try:
        spec = importlib.util.spec_from_file_location("interface_here", INTERFACE)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        del builtins.expose
    return found


class ServeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.agent = Agent(config={"kernel": {"python": sys.executable},
                                  "env": {"PYTHONDONTWRITEBYTECODE": "1"}})
        cls.remote = tempfile.mkdtemp(prefix="gpubox-serve-")
        cls.client = gpubox.Client(cls.agent.ipc)
        cls.lib = served.serve(cls.client, INTERFACE, "tools", remote_dir=cls.remote + "/tools")
        cls.service = served.Service(cls.client, "tools")

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        code = cls.agent.stop()
        shutil.rmtree(cls.remote, ignore_errors=True)
        assert code == 0, "the agent should exit 0 on SIGTERM, got %s" % code

    def new_client(self):
        client = gpubox.Client(self.agent.ipc)
        self.addCleanup(client.close)
        return client

    def start(self, name, path=INTERFACE, **params):
        remote = "%s/%s/interface.py" % (self.remote, name)
        with open(path, "rb") as f:
            self.client.call("fs.write", path=remote, data=f.read(), parents=True)
        return self.client.call("serve.start", params=dict(name=name, path=remote, **params))

    # -- describing --------------------------------------------------------

    def test_functions_are_described_with_schemas(self):
        entry = self.service.info()
        self.assertEqual(entry["state"], "ready")
        self.assertIsInstance(entry["pid"], int)
        functions = {f["name"]: f for f in entry["functions"]}
        self.assertEqual(list(functions), ["add", "echo", "count", "fail", "sleep", "pid", "crash", "model_path", "fancy", "spin",
                                           "spin_state"])
        add = functions["add"]
        self.assertEqual(add["signature"], "(a: int, b: int = 2) -> int")
        self.assertEqual(add["doc"], "Adds two numbers.")
        self.assertEqual(add["returns"], "int")
        self.assertFalse(add["is_generator"])
        self.assertEqual(add["parameters"], [
            {"name": "a", "kind": "positional_or_keyword", "annotation": "int"},
            {"name": "b", "kind": "positional_or_keyword", "annotation": "int", "default": "2"}])
        self.assertEqual(add["input_schema"], {"type": "object", "properties": {
            "a": {"type": "integer"}, "b": {"type": "integer", "default": 2}}, "required": ["a"],
            "additionalProperties": False})
        self.assertTrue(functions["count"]["is_generator"])
        self.assertEqual(functions["echo"]["description"], "echo(value)")
        fancy = functions["fancy"]
        self.assertEqual(fancy["signature"], str(inspect.signature(original_functions()["fancy"])))
        props = fancy["input_schema"]["properties"]
        self.assertEqual(props["b"], {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None})
        self.assertEqual(props["mode"], {"enum": ["x", "y"], "type": "string", "default": "x"})
        self.assertEqual(props["weights"], {"type": "object", "additionalProperties": {"type": "number"}, "default": None})
        self.assertEqual(props["ids"], {"type": "array", "items": {"type": "integer"}, "default": []})
        self.assertNotIn("rest", props)
        self.assertTrue(fancy["input_schema"]["additionalProperties"])
        self.assertEqual(fancy["input_schema"]["required"], ["a"])
        self.assertEqual([p["kind"] for p in fancy["parameters"]],
                         ["positional_only", "positional_or_keyword", "var_positional", "keyword_only",
                          "keyword_only", "keyword_only", "keyword_only", "var_keyword"])

    # -- calls -------------------------------------------------------------

    def test_call_values(self):
        self.assertEqual(self.service.call("add", 1), 3)
        self.assertEqual(self.service.call("add", 1, b=5), 6)
        value = {"s": "text", "b": b"\x00\xff", "l": [1, -2, 3.5, None, True], "big": 2 ** 63, "neg": -2 ** 62}
        self.assertEqual(self.service.call("echo", value), value)

    def test_generator_streams_items(self):
        self.assertEqual(list(self.service.stream("count", 5, start=10)), [10, 11, 12, 13, 14])
        # More items than the worker's window of credit: flow control lets them all through.
        self.assertEqual(list(self.service.stream("count", 40)), list(range(40)))

    def test_exception_comes_back_with_remote_traceback(self):
        with self.assertRaises(served.RemoteError) as caught:
            self.service.call("fail", "no good")
        error = caught.exception
        self.assertIsInstance(error, gpubox.RpcError)
        self.assertEqual(error.code, "raised")
        self.assertEqual(error.type, "ValueError")
        self.assertEqual(error.remote_message, "no good")
        self.assertIn('interface.py", line %d, in fail' % line_of(INTERFACE, "FAIL_LINE"), error.remote_traceback)
        self.assertNotIn("gpubox-serve-worker", error.remote_traceback)

    def test_bad_params_get_clear_errors(self):
        client = self.client
        error = self.assertRaisesRpc("not_found", client.call, "serve.call", service="nope", function="add")
        self.assertIn("nope", error.message)
        error = self.assertRaisesRpc("not_found", client.call, "serve.call", service="tools", function="nope")
        self.assertIn("add, echo", error.message)
        error = self.assertRaisesRpc("invalid_request", client.call, "serve.call", service="tools", function="add")
        self.assertIn("missing a required argument: 'a'", error.message)
        error = self.assertRaisesRpc("invalid_request", client.call, "serve.call", service="tools", function="add",
                                     args=[1, 2, 3])
        self.assertIn("too many positional arguments", error.message)
        self.assertRaisesRpc("invalid_request", client.call, "serve.call", service="tools", function="add", args={"a": 1})
        self.assertRaisesRpc("invalid_request", client.call, "serve.call", service="tools", function="add", kwargs=[1])
        self.assertRaisesRpc("invalid_request", client.call, "serve.call", function="add")
        self.assertRaisesRpc("invalid_request", client.call, "serve.start", name="x", path="relative.py")
        self.assertRaisesRpc("invalid_request", client.call, "serve.start", name="bad name!", path=INTERFACE)
        self.assertRaisesRpc("not_found", client.call, "serve.start", name="x", path="/no/such/file.py")
        self.assertRaisesRpc("already_exists", client.call, "serve.start", name="tools",
                             path=self.remote + "/tools/interface.py")
        self.assertRaisesRpc("not_found", client.call, "serve.stop", name="nope")
        self.assertRaisesRpc("not_found", client.call, "serve.logs", name="nope")
        self.assertEqual(self.service.call("add", 1), 3)  # all of that changed nothing

    def assertRaisesRpc(self, code, fn, *args, **kwargs):
        with self.assertRaises(gpubox.RpcError) as caught:
            fn(*args, **kwargs)
        self.assertEqual(caught.exception.code, code, caught.exception.message)
        return caught.exception

    def test_logs_keep_the_workers_output(self):
        logs = self.service.logs()
        self.assertIn("interface imported", logs["stdout"])
        self.assertEqual(self.service.logs(tail_bytes=4)["stdout"], "ted\n")

    def test_get_model_path_names_no_unknown_model(self):
        with self.assertRaises(served.RemoteError) as caught:
            self.service.call("model_path", "missing")
        self.assertEqual(caught.exception.type, "KeyError")

    # -- timing ------------------------------------------------------------

    def test_timeout_ends_the_call_and_the_worker_goes_on(self):
        began = time.monotonic()
        with self.assertRaises(gpubox.RpcError) as caught:
            self.service.call("sleep", 5, timeout=0.5)
        took = time.monotonic() - began
        self.assertEqual(caught.exception.code, "deadline_exceeded")
        self.assertLess(took, 2.0)
        self.assertEqual(self.service.call("add", 2), 4)  # not blocked by the sleeping thread

    def test_timeout_stops_a_pure_python_call_in_its_thread(self):
        with self.assertRaises(gpubox.RpcError) as caught:
            self.service.call("spin", 30, timeout=0.3)
        self.assertEqual(caught.exception.code, "deadline_exceeded")
        # The worker raised an exception in the call's thread: it ended long before its 30 s.
        self.assertTrue(wait_until(lambda: self.service.call("spin_state") == "stopped", timeout=3))

    def test_a_long_call_does_not_block_a_quick_one(self):
        done = {}

        def slow():
            client = gpubox.Client(self.agent.ipc)
            try:
                served.Service(client, "tools").call("sleep", 1.5)
            finally:
                client.close()
            done["slow"] = time.monotonic()

        thread = threading.Thread(target=slow)
        began = time.monotonic()
        thread.start()
        time.sleep(0.2)
        quick_began = time.monotonic()
        self.assertEqual(self.new_client_service().call("add", 40), 42)
        done["quick"] = time.monotonic()
        thread.join()
        self.assertLess(done["quick"] - quick_began, 0.5)
        self.assertLess(done["quick"], done["slow"])
        self.assertGreaterEqual(done["slow"] - began, 1.5)

    def new_client_service(self):
        return served.Service(self.new_client(), "tools")

    # -- tensors -----------------------------------------------------------

    @unittest.skipIf(torch is None, "torch tensors: the venv's python")
    def test_torch_tensor_of_256_mib_round_trip(self):
        tensor = torch.rand(64 << 20)  # 256 MiB of float32
        self.assertEqual(tensor.numel() * tensor.element_size(), 256 << 20)
        began = time.monotonic()
        back = self.service.call("echo", tensor)
        took = time.monotonic() - began
        self.assertEqual(back.dtype, torch.float32)
        self.assertEqual(back.shape, tensor.shape)
        self.assertTrue(torch.equal(back, tensor))
        print("\n256 MiB torch round trip: %.3f s, %.0f MiB/s each way" % (took, 512 / took), file=sys.stderr)
        for dtype in (torch.bfloat16, torch.int64, torch.bool, torch.float16):
            small = (torch.arange(24).reshape(2, 3, 4) % 3).to(dtype)
            back = self.service.call("echo", {"t": small, "list": [small[0]]})
            self.assertEqual(back["t"].dtype, dtype)
            self.assertEqual(back["t"].shape, (2, 3, 4))
            self.assertTrue(torch.equal(back["t"], small))
            self.assertTrue(torch.equal(back["list"][0], small[0]))
        empty = self.service.call("echo", torch.empty(0, 3))
        self.assertEqual(empty.shape, (0, 3))

    def test_numpy_array_round_trip(self):
        array = np.arange(3 * 1000 * 1000, dtype=np.float64).reshape(3, 1000, 1000)
        back = self.service.call("echo", array)
        back = back.numpy() if torch is not None else back  # results come back as torch when it imports
        self.assertEqual(back.dtype, np.float64)
        self.assertEqual(back.shape, (3, 1000, 1000))
        self.assertTrue(np.array_equal(back, array))
        ints = self.service.call("echo", [np.array([1, 2, 3], dtype=np.int32), np.float32(1.5)])
        self.assertEqual(ints[1], 1.5)
        self.assertEqual(list(np.asarray(ints[0])), [1, 2, 3])

    # -- crashes -----------------------------------------------------------

    def test_worker_killed_mid_call_then_restarted(self):
        self.start("crashy")
        service = served.Service(self.client, "crashy")
        old_pid = service.call("pid")
        errors = {}

        def long_call():
            client = gpubox.Client(self.agent.ipc)
            try:
                served.Service(client, "crashy").call("sleep", 30)
            except gpubox.RpcError as error:
                errors["error"] = error
            finally:
                client.close()

        thread = threading.Thread(target=long_call)
        thread.start()
        time.sleep(0.3)
        os.kill(old_pid, 9)
        thread.join(10)
        self.assertFalse(thread.is_alive())
        self.assertEqual(errors["error"].code, "unavailable")
        self.assertIn("killed by SIGKILL", errors["error"].message)
        self.assertEqual(service.call("add", 1, 1), 2)  # waits for the restart
        info = service.info()
        self.assertEqual(info["state"], "ready")
        self.assertEqual(info["restarts"], 1)
        self.assertNotEqual(service.call("pid"), old_pid)
        # A function that kills its own worker: unavailable, and the next call works again.
        with self.assertRaises(gpubox.RpcError) as caught:
            service.call("crash")
        self.assertEqual(caught.exception.code, "unavailable")
        self.assertEqual(service.call("add", 2, 2), 4)
        service.stop()
        self.assertNotIn("crashy", [s["name"] for s in self.client.call("serve.list")["services"]])

    def test_restart_limit_marks_the_service_failed(self):
        self.start("fragile", restart_limit=0)
        service = served.Service(self.client, "fragile")
        with self.assertRaises(gpubox.RpcError):
            service.call("crash")
        self.assertTrue(wait_until(lambda: service.info()["state"] == "failed", timeout=5))
        self.assertIn("restart_limit 0", service.info()["error"])
        with self.assertRaises(gpubox.RpcError) as caught:
            service.call("add", 1)
        self.assertEqual(caught.exception.code, "unavailable")
        service.stop()

    def test_interface_that_fails_to_import(self):
        with self.assertRaises(gpubox.RpcError) as caught:
            self.start("broken", path=BROKEN)
        error = caught.exception
        self.assertEqual(error.code, "invalid_request")
        self.assertIn("RuntimeError: broken on purpose", error.message)
        self.assertIn("line %d" % line_of(BROKEN, "BROKEN_LINE"), error.message)
        self.assertNotIn("broken", [s["name"] for s in self.client.call("serve.list")["services"]])
        self.assertTrue(self.client.call("sys.ping")["pong"])
        self.start("broken", path=INTERFACE)  # the name is free again
        self.client.call("serve.stop", name="broken")

    # -- generated forms -----------------------------------------------------

    def test_generated_library(self):
        lib = self.lib
        originals = original_functions()
        for name in ("add", "count", "fail", "fancy", "sleep"):
            generated, original = getattr(lib, name), originals[name]
            self.assertEqual(str(inspect.signature(generated)), str(inspect.signature(original)), name)
            self.assertEqual(inspect.getdoc(generated), inspect.getdoc(original))
        self.assertEqual(lib.add(1), 3)
        self.assertEqual(lib.add(a=1, b=10), 11)
        self.assertTrue(inspect.isgeneratorfunction(lib.count))
        self.assertEqual(list(lib.count(3, start=2)), [2, 3, 4])
        self.assertEqual(lib.fancy(1, "s", 1.5, 2.5, flag=True, ids=[7], z=3),
                         [1, "s", [1.5, 2.5], True, "x", None, [7], {"z": 3}])
        self.assertEqual(lib.fancy(5), [5, None, [], False, "x", None, [], {}])
        with self.assertRaises(served.RemoteError):
            lib.fail("x")
        source = lib.__gpubox_source__
        self.assertNotIn("ipc://", source)
        self.assertNotIn(self.agent.dir, source)

    def test_prompt_and_mcp(self):
        text = served.serve(self.client, INTERFACE, "tools2", expose_as="prompt", remote_dir=self.remote + "/tools2")
        self.assertIn("# Service `tools2`", text)
        self.assertIn("## `add(a: int, b: int = 2) -> int`", text)
        self.assertIn("Adds two numbers.", text)
        self.assertIn("A generator", text)
        config = served.serve(self.client, INTERFACE, "tools2", expose_as="mcp", sandbox_ref="sb-1",
                              remote_dir=self.remote + "/tools2")
        server = config["mcpServers"]["tools2"]
        self.assertEqual(server["args"], ["mcp", "--sandbox", "sb-1", "--service", "tools2"])
        self.assertTrue(os.path.isabs(server["command"]))
        with self.assertRaises(ValueError):
            served.serve(self.client, INTERFACE, "tools2", expose_as="mcp")
        with self.assertRaises(ValueError):
            served.serve(self.client, INTERFACE, "tools2", expose_as="nothing")
        self.client.call("serve.stop", name="tools2")


if __name__ == "__main__":
    unittest.main()
