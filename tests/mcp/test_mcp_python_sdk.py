"""`gpubox mcp` driven by the official MCP Python SDK (PyPI `mcp` 2.3.0, in
build/venv: run with build/venv/bin/python) over stdio, against a real local
sandbox: the SDK's default connect (`mode="auto"`: server/discover, the
stateless 2026-07-28 revision) and its initialize handshake
(`mode="legacy"`, 2025-11-25), and every tool of the full set but the ones
the TypeScript test covers alone; the notebook file is checked by Debian's
nbformat. Needs root, GPUBOX_CLI and GPUBOX_AGENT."""

import asyncio
import base64
import json
import os
import subprocess
import unittest

from mcp import Client, StdioServerParameters

from mcp_harness import CLI, SandboxHome, become_subreaper, validate_notebook

PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")
ALL_TOOLS = {"create_sandbox", "list_sandboxes", "terminate_sandbox", "execute_code", "add_markdown", "exec", "read_file",
             "write_file", "list_files", "gpu_status", "processes", "snapshot", "submit_job", "wait_job", "collect_job",
             "list_served", "call_served", "list_models", "model_hooks", "tokenize", "generate", "run_model",
             "sae_top_features", "show_budget"}


def setUpModule():
    become_subreaper()


def server(home, *args):
    return StdioServerParameters(command=CLI, args=["mcp", *args, "--notebook-dir", home.notebooks],
                                 env={"XDG_STATE_HOME": home.state, "GPUBOX_AGENT": home.env["GPUBOX_AGENT"],
                                      "PATH": os.environ.get("PATH", "")})


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 180))


class PythonSdkTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.home = SandboxHome()

    @classmethod
    def tearDownClass(cls):
        cls.home.close()

    def client(self, mode="auto"):
        return Client(server(self.home, "--sandbox", self.home.id), mode=mode)

    def test_modern_connect_lists_every_tool(self):
        async def body():
            async with self.client() as client:
                self.assertEqual(client.protocol_version, "2026-07-28")
                tools = (await client.list_tools()).tools
                self.assertEqual({tool.name for tool in tools}, ALL_TOOLS)
                execute = [tool for tool in tools if tool.name == "execute_code"][0]
                self.assertIn("code", execute.input_schema["required"])
                return await client.call_tool("execute_code", {"code": "'modern'"})
        result = run(body())
        self.assertFalse(result.is_error)
        self.assertEqual(result.structured_content["results"], ["'modern'"])
        # The text block summarizes, a line per field: the JSON itself is structuredContent only.
        self.assertIn("results: [\"'modern'\"]\n", result.content[0].text)
        self.assertIn("status: ok\n", result.content[0].text)

    def test_legacy_handshake(self):
        async def body():
            async with self.client(mode="legacy") as client:
                self.assertEqual(client.protocol_version, "2025-11-25")
                self.assertIn("execute_code", client.instructions or "")
                return await client.call_tool("exec", {"command": "echo legacy"})
        result = run(body())
        self.assertEqual(result.structured_content["stdout"], "legacy\n")

    def test_execute_code_outputs_errors_images_and_the_notebook(self):
        session = "py-session"
        progress = []

        async def on_progress(value, total, message):
            progress.append((value, message))

        async def body():
            async with self.client() as client:
                first = await client.call_tool("execute_code", {"session_id": session, "sandbox_id": self.home.id,
                                                                "code": "x = 41\nprint('hello')\nx + 1"})
                error = await client.call_tool("execute_code", {"session_id": session, "code": "1/0"})
                image = await client.call_tool("execute_code", {"session_id": session, "code":
                    "import base64\nfrom IPython.display import Image, display\n"
                    "display(Image(data=base64.b64decode('%s')))" % PNG})
                await client.call_tool("add_markdown", {"session_id": session, "text": "# Findings\nx is *42*."})
                big = await client.call_tool("execute_code", {"session_id": session, "code": "print('x' * 400000)"})
                self.assertLess(len(big.structured_content["stdout"]), 300000)
                self.assertIn("truncated", big.structured_content["stdout"])
                slow = await client.call_tool("execute_code", {"session_id": session, "code":
                    "import time\nprint('tick', flush=True)\ntime.sleep(6.5)\nprint('tock')"},
                    progress_callback=on_progress)
                return first, error, image, slow
        first, error, image, slow = run(body())
        self.assertFalse(first.is_error)
        self.assertEqual(first.structured_content["stdout"], "hello\n")
        self.assertEqual(first.structured_content["results"], ["42"])
        self.assertTrue(error.is_error)
        self.assertEqual(error.structured_content["error"]["ename"], "ZeroDivisionError")
        self.assertIn("division by zero", "\n".join(error.structured_content["error"]["traceback"]))
        self.assertNotIn("\x1b[", json.dumps(error.structured_content))
        # The text block most agents read names the error and ends with the traceback's last lines.
        text = error.content[0].text
        self.assertIn("error: ZeroDivisionError: division by zero", text)
        self.assertIn("traceback (last", text)
        self.assertIn("1/0", text)
        self.assertNotIn("(in structuredContent)", text.split("traceback")[0])
        images = [block for block in image.content if block.type == "image"]
        self.assertEqual(len(images), 1)
        self.assertEqual(images[0].mime_type, "image/png")
        self.assertEqual(base64.b64decode(images[0].data), base64.b64decode(PNG))
        self.assertEqual(slow.structured_content["stdout"], "tick\ntock\n")
        # One for each output, one keepalive for the quiet 5 s.
        self.assertGreaterEqual(len(progress), 3, progress)
        self.assertIn("running for", " ".join(message or "" for _, message in progress))
        self.assertEqual([value for value, _ in progress], sorted(value for value, _ in progress))

        path = first.structured_content["notebook"]
        self.assertEqual(path, os.path.join(self.home.notebooks, session + ".ipynb"))
        book = validate_notebook(path)
        self.assertEqual((book["nbformat"], book["nbformat_minor"]), (4, 5))
        cells = book["cells"]
        self.assertEqual([cell["cell_type"] for cell in cells], ["code", "code", "code", "markdown", "code", "code"])
        self.assertEqual(len("".join(cells[4]["outputs"][0]["text"])), 400001)  # the notebook keeps it all
        self.assertEqual([o["output_type"] for o in cells[0]["outputs"]], ["stream", "execute_result"])
        self.assertEqual(cells[0]["outputs"][1]["data"]["text/plain"], "42")
        counts = [cell["execution_count"] for cell in cells if cell["cell_type"] == "code"]
        self.assertEqual(counts, sorted(counts))
        self.assertEqual(cells[0]["outputs"][1]["execution_count"], cells[0]["execution_count"])
        self.assertEqual(cells[1]["outputs"][-1]["output_type"], "error")
        self.assertEqual(cells[1]["outputs"][-1]["ename"], "ZeroDivisionError")
        self.assertEqual(cells[2]["outputs"][0]["output_type"], "display_data")
        self.assertIn("image/png", cells[2]["outputs"][0]["data"])
        self.assertEqual("".join(cells[3]["source"]), "# Findings\nx is *42*.")
        self.assertEqual("".join(cells[5]["outputs"][0]["text"]), "tick\ntock\n")

    def test_files_exec_processes_gpu(self):
        async def body():
            async with self.client() as client:
                written = await client.call_tool("write_file", {"path": "notes/a.txt", "content": "héllo\n"})
                binary = await client.call_tool("write_file", {"path": "/workspace/notes/b.bin", "encoding": "base64",
                                                               "content": base64.b64encode(b"\x00\xff\x01").decode()})
                read = await client.call_tool("read_file", {"path": "notes/a.txt"})
                read_binary = await client.call_tool("read_file", {"path": "notes/b.bin"})
                listed = await client.call_tool("list_files", {"path": "notes"})
                ran = await client.call_tool("exec", {"command": "cat notes/a.txt; echo err >&2; exit 3",
                                                      "cwd": "/workspace"})
                argv = await client.call_tool("exec", {"argv": ["/bin/echo", "a b"]})
                # 300 KiB of output: 256 KiB of it in the result, and where all of it was kept.
                big = await client.call_tool("exec", {"command": "head -c 307200 /dev/zero | tr '\\0' x"})
                kept = await client.call_tool("exec", {"command": "wc -c < %s" % big.structured_content["stdout_file"]})
                procs = await client.call_tool("processes", {})
                boxes = await client.call_tool("list_sandboxes", {})
                self.assertIn(self.home.id, [b["sandbox_id"] for b in boxes.structured_content["sandboxes"]])
                gpu = await client.call_tool("gpu_status", {})
                return written, binary, read, read_binary, listed, ran, argv, big, kept, procs, gpu
        written, binary, read, read_binary, listed, ran, argv, big, kept, procs, gpu = run(body())
        self.assertEqual(written.structured_content["size"], len("héllo\n".encode()))
        self.assertEqual(binary.structured_content["size"], 3)
        self.assertEqual(read.structured_content["content"], "héllo\n")
        self.assertEqual(read_binary.structured_content["encoding"], "base64")
        self.assertEqual(base64.b64decode(read_binary.structured_content["content"]), b"\x00\xff\x01")
        self.assertEqual(sorted(os.path.basename(e["path"]) for e in listed.structured_content["entries"]), ["a.txt", "b.bin"])
        self.assertEqual((ran.structured_content["exit_code"], ran.structured_content["stdout"],
                          ran.structured_content["stderr"]), (3, "héllo\n", "err\n"))
        self.assertEqual(argv.structured_content["stdout"], "a b\n")
        # The text block is a summary a line per field, the output as text, not the JSON again.
        summary = ran.content[0].text
        self.assertIn("exit_code: 3\n", summary)
        self.assertIn("stdout:\nhéllo\n", summary)
        self.assertNotIn("{", summary)
        head, note = big.structured_content["stdout"].split("\n[output cut at 256 KiB here; ")
        self.assertEqual(head, "x" * (256 << 10))
        self.assertEqual(note, "all 307200 bytes are in %s (read_file)]\n" % big.structured_content["stdout_file"])
        self.assertEqual(kept.structured_content["stdout"], "307200\n")
        pid1 = [p for p in procs.structured_content["processes"] if p["pid"] == 1]
        self.assertIn("gpubox-agent", " ".join(pid1[0]["cmdline"]))
        # No model host in this sandbox: what the agent knows, and why there is no more.
        self.assertFalse(gpu.is_error)
        self.assertEqual(gpu.structured_content["source"], "none")
        self.assertIn("model host", gpu.structured_content["message"])

    def test_jobs_and_snapshot(self):
        out_dir = os.path.join(self.home.state, "job-out")

        async def body():
            async with self.client() as client:
                job = await client.call_tool("submit_job", {"command": "echo result > $GPUBOX_OUT/r.txt; echo done",
                                                            "intent": "mcp test"})
                job_id = job.structured_content["job_id"]
                waited = await client.call_tool("wait_job", {"job_id": job_id, "timeout": 60})
                collected = await client.call_tool("collect_job", {"job_id": job_id, "out_dir": out_dir})
                again = await client.call_tool("collect_job", {"job_id": job_id, "out_dir": out_dir})
                snap = await client.call_tool("snapshot", {"name": "mcp-snap"})
                return job, waited, collected, again, snap
        job, waited, collected, again, snap = run(body())
        self.assertTrue(job.structured_content["job_id"].startswith("job-"))
        self.assertTrue(waited.structured_content["finished"])
        self.assertEqual(waited.structured_content["status"], "succeeded")
        self.assertEqual(collected.structured_content["status"], "succeeded")
        with open(os.path.join(out_dir, "out", "r.txt")) as f:
            self.assertEqual(f.read(), "result\n")
        self.assertTrue(again.is_error)  # the directory exists: nothing overwritten
        self.assertEqual(snap.structured_content["snapshot"], "mcp-snap")
        listed = self.home.cli("--json", "snapshots")
        self.assertIn("mcp-snap", listed.stdout)

    def test_served_functions(self):
        async def body():
            async with self.client() as client:
                return await client.call_tool("list_served", {})
        listed = run(body())
        self.assertFalse(listed.is_error, listed.structured_content)
        self.assertIn("services", listed.structured_content)


INTERFACE = '''
@expose
def add(a: int, b: int = 2) -> int:
    """Add two numbers."""
    return a + b


@expose
def fail(message: str) -> None:
    """Raise ValueError."""
    raise ValueError(message)


@expose
def count(n: int):
    """Yield 0 .. n-1."""
    for i in range(n):
        yield i
'''


class ServiceModeTest(unittest.TestCase):
    """`gpubox mcp --sandbox X --service NAME` (tools = the service's functions) and call_served, per the
    serve.* contract (rpc/PROTOCOL.md "Served functions")."""

    @classmethod
    def setUpClass(cls):
        cls.home = SandboxHome()
        with open(os.path.join(cls.home.state, "calc.py"), "w") as f:
            f.write(INTERFACE)
        put = cls.home.cli("put", cls.home.id, os.path.join(cls.home.state, "calc.py"), "/workspace/calc.py")
        assert put.returncode == 0, put.stderr
        started = cls.home.cli("rpc", cls.home.id, "serve.start", json.dumps({"name": "calc", "path": "/workspace/calc.py"}))
        assert started.returncode == 0, "serve.start failed: " + (started.stderr or started.stdout).strip()

    @classmethod
    def tearDownClass(cls):
        cls.home.close()

    def test_tools_are_the_service_functions(self):
        async def body():
            async with Client(server(self.home, "--sandbox", self.home.id, "--service", "calc")) as client:
                tools = {tool.name: tool for tool in (await client.list_tools()).tools}
                added = await client.call_tool("add", {"a": 1})
                failed = await client.call_tool("fail", {"message": "boom"})
                counted = await client.call_tool("count", {"n": 3})
                try:
                    await client.call_tool("add", {"a": "x"})
                    bad = None
                except Exception as e:  # McpError
                    bad = e
                return tools, added, failed, counted, bad
        tools, added, failed, counted, bad = run(body())
        self.assertEqual(set(tools), {"add", "fail", "count"})
        self.assertEqual(tools["add"].description, "Add two numbers.")
        self.assertEqual(tools["add"].input_schema["required"], ["a"])
        self.assertEqual(added.structured_content["value"], 3)
        self.assertTrue(failed.is_error)
        self.assertEqual(failed.structured_content["type"], "ValueError")
        self.assertIn("boom", failed.structured_content["traceback"])
        self.assertEqual(counted.structured_content["items"], [0, 1, 2])
        self.assertIn("arguments.a", str(bad))

    def test_list_and_call_served_in_the_full_set(self):
        async def body():
            async with Client(server(self.home, "--sandbox", self.home.id)) as client:
                listed = await client.call_tool("list_served", {})
                called = await client.call_tool("call_served", {"service": "calc", "function": "add", "args": [2, 3]})
                return listed, called
        listed, called = run(body())
        self.assertEqual([s["name"] for s in listed.structured_content["services"]], ["calc"])
        self.assertEqual(called.structured_content["value"], 5)


if __name__ == "__main__":
    unittest.main()
