# Over 600 lines: every test shares one real sandbox made in setUpModule (a real agent as PID 1); split, each file would start its own.
"""`gpubox attach` and `gpubox kernelspec install` against a real local sandbox
(the real agent as PID 1 of its own namespaces, its kernel's sockets on the
sandbox's own 127.0.0.1): the same jupyter_kernel_test conformance suite as
the standalone kernel, jupyter_client execute/interrupt/stdin, nbclient, two
frontends at once, heartbeat, shutdown and restart, the end of the sandbox,
signals and bad input.

Run by ctest (kernel_test_attach) with Debian's /usr/bin/python3; needs root
and GPUBOX_CLI naming the gpubox binary. Jupyter files go to temp dirs
(JUPYTER_DATA_DIR, JUPYTER_RUNTIME_DIR), never the real system.
"""
import ctypes
import json
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

import zmq
from jupyter_client import BlockingKernelClient
from jupyter_client.manager import KernelManager, start_new_kernel

import interrupt_rounds
from kernel_harness import missing, requires
import test_conformance

CLI = os.environ.get("GPUBOX_CLI", "")
SPEC = "gpubox-attach-test"
BOX = "attach-box"
PR_SET_CHILD_SUBREAPER = 36
TIMEOUT = 60
dirs = {}


def cli(*args, timeout=60):
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=timeout)


def create_sandbox(name):
    created = cli("--json", "create", "--name", name, "--config", dirs["config"])
    if created.returncode != 0:
        raise AssertionError("gpubox create failed: " + created.stderr)
    return json.loads(created.stdout)["id"]


def setUpModule():
    if not CLI or os.geteuid() != 0:
        missing("needs GPUBOX_CLI and root")
    test_conformance.require_kernelspec()
    # The agents the CLI detaches are reparented here and reaped at the end, as init would.
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    root = tempfile.mkdtemp(prefix="gpubox-attach-")
    dirs.update(root=root, data=os.path.join(root, "jupyter-data"), runtime=os.path.join(root, "jupyter-runtime"))
    os.environ["XDG_STATE_HOME"] = os.path.join(root, "state")
    os.environ["JUPYTER_DATA_DIR"] = dirs["data"]
    os.environ["JUPYTER_RUNTIME_DIR"] = dirs["runtime"]
    dirs["config"] = os.path.join(root, "config.json")
    with open(dirs["config"], "w") as f:
        json.dump({"kernel": {"python": "/usr/bin/python3"}}, f)
    dirs["box"] = create_sandbox(BOX)
    installed = cli("kernelspec", "install", "--user", "--sandbox", BOX, "--name", SPEC)
    if installed.returncode != 0:
        raise AssertionError("gpubox kernelspec install failed: " + installed.stderr)


def tearDownModule():
    if "root" not in dirs:
        return
    cli("terminate", "--all")
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
    shutil.rmtree(dirs["root"], ignore_errors=True)


class AttachConformance(test_conformance.GpuboxKernelConformance):
    """jupyter_kernel_test's suite, unchanged, with jupyter_client starting `gpubox attach`."""
    kernel_name = SPEC


def collect(kc, msg_id, timeout=TIMEOUT):
    """The iopub messages of msg_id up to its idle status, and its shell reply."""
    messages = []
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError("no idle status within %ss" % timeout)
        try:
            msg = kc.get_iopub_msg(timeout=remaining)
        except queue.Empty:
            continue
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            break
        messages.append(msg)
    while True:
        reply = kc.get_shell_msg(timeout=timeout)
        if reply["parent_header"].get("msg_id") == msg_id:
            return reply, messages


def stdout_of(messages):
    return "".join(m["content"]["text"] for m in messages if m["msg_type"] == "stream" and m["content"]["name"] == "stdout")


class Attach:
    """A `gpubox attach` process serving its own fresh connection file."""

    def __init__(self, box, path=None):
        args = [CLI, "attach", box] + (["--connection-file", path] if path else [])
        self.process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        first = self.process.stdout.readline()
        if not first.startswith("connection file: "):
            self.process.kill()
            raise AssertionError("attach printed %r; stderr: %s" % (first, self.process.stderr.read()))
        self.path = first[len("connection file: "):].strip()
        self.hint = self.process.stdout.readline()

    def client(self):
        kc = BlockingKernelClient()
        kc.load_connection_file(self.path)
        kc.start_channels()
        kc.wait_for_ready(timeout=TIMEOUT)
        return kc

    def wait(self, timeout=20):
        code = self.process.wait(timeout=timeout)
        return code, self.process.stderr.read()

    def close(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.process.stdout.close()
        self.process.stderr.close()


class AttachClientTest(unittest.TestCase):
    """jupyter_client through the kernelspec that `kernelspec install --sandbox` wrote."""

    @classmethod
    def setUpClass(cls):
        cls.km, cls.kc = start_new_kernel(kernel_name=SPEC, startup_timeout=TIMEOUT)

    @classmethod
    def tearDownClass(cls):
        cls.kc.stop_channels()
        cls.km.shutdown_kernel(now=True)

    def run_cell(self, code, **kwargs):
        return collect(self.kc, self.kc.execute(code, **kwargs))

    def test_code_runs_inside_the_sandbox(self):
        reply, messages = self.run_cell("import socket; print(socket.gethostname())")
        self.assertEqual(reply["content"]["status"], "ok")
        self.assertEqual(stdout_of(messages), BOX + "\n")

    def test_interrupt_request_through_attach(self):
        msg_id = self.kc.execute("import time; time.sleep(100)")
        busy = self.kc.get_iopub_msg(timeout=TIMEOUT)
        while not (busy["msg_type"] == "status" and busy["parent_header"].get("msg_id") == msg_id):
            busy = self.kc.get_iopub_msg(timeout=TIMEOUT)
        time.sleep(0.5)
        start = time.monotonic()
        self.km.interrupt_kernel()  # interrupt_mode message: interrupt_request on control
        reply, messages = collect(self.kc, msg_id, timeout=10)
        self.assertLess(time.monotonic() - start, 3)
        self.assertEqual(reply["content"]["status"], "error")
        self.assertEqual(reply["content"]["ename"], "KeyboardInterrupt")
        reply, messages = self.run_cell("print('still here')")
        self.assertEqual(stdout_of(messages), "still here\n")

    def test_a_reply_behind_more_output_than_attach_holds_arrives_before_iopub_is_read(self):
        # A frontend may wait for its execute_reply before it reads iopub (jupyter_client's
        # execute, then get_shell_msg). 4,000 flushed lines of 8 KiB, one stream message each,
        # are more than ZeroMQ and the kernel's TCP connection hold unread, so attach holds the
        # rest; 96 MiB more is more than it holds (64 MiB). The reply must not wait behind them.
        code = ("import sys, time\n"
                "for i in range(4000): print('%06d' % i + 'z' * 8185, flush=True); time.sleep(0.0002)\n"
                "for _ in range(12288): sys.stdout.write('y' * 8191 + '\\n')")
        msg_id = self.kc.execute(code)
        reply = interrupt_rounds.wait_for_reply(self.kc, msg_id, 120)
        self.assertEqual(reply["content"]["status"], "ok")
        # The numbered lines arrive whole and in order (held, never dropped); of the bulk that
        # follows some is dropped, and the cell's statuses are kept.
        messages = interrupt_rounds.iopub_of(self.kc, [msg_id], TIMEOUT)[msg_id]
        self.assertEqual([messages[0]["msg_type"], messages[0]["content"]["execution_state"]], ["status", "busy"])
        text = stdout_of(messages)
        numbered = "".join("%06d%s\n" % (i, "z" * 8185) for i in range(4000))
        self.assertEqual(text[:len(numbered)], numbered)
        bulk = text[len(numbered):]
        self.assertLess(len(bulk), 12288 * 8192)
        self.assertEqual(set(bulk), {"y", "\n"})
        reply, messages = self.run_cell("print('after')")
        self.assertEqual(reply["content"]["status"], "ok")
        self.assertEqual(stdout_of(messages), "after\n")

    def test_interrupt_then_execute_rounds_through_attach(self):
        interrupt_rounds.run_jupyter_rounds(self, self.kc, self.km.interrupt_kernel, count=50, seed=3)

    def test_plots_show_in_order_and_counts_follow_rpc_cells(self):
        from test_first_minutes import PLOT_CELL, output_sequence
        from kernel_harness import run_cell
        self.assertEqual(output_sequence(run_cell(self.kc, PLOT_CELL)),
                         [("stdout", "A\n"), ("display", "image"), ("stdout", "B\n"), ("display", "image"),
                          ("display", "image"), ("display", "image"), ("result", "'D'")])
        rpc_count = json.loads(cli("run-code", BOX, "--json", "'over rpc'").stdout)["execution_count"]
        cell = run_cell(self.kc, "'attached'")
        self.assertEqual(cell.content["execution_count"], rpc_count + 1)
        self.assertEqual(cell.of_type("execute_input")[0]["content"]["execution_count"], rpc_count + 1)

    def test_input_through_the_stdin_channel(self):
        msg_id = self.kc.execute("name = input('who? ')\nprint('hello', name)", allow_stdin=True)
        request = self.kc.get_stdin_msg(timeout=TIMEOUT)
        self.assertEqual(request["msg_type"], "input_request")
        self.assertEqual(request["content"]["prompt"], "who? ")
        self.kc.input("gpubox")
        reply, messages = collect(self.kc, msg_id)
        self.assertEqual(reply["content"]["status"], "ok")
        self.assertEqual(stdout_of(messages), "hello gpubox\n")

    def test_a_large_write_arrives_complete(self):
        reply, messages = self.run_cell("import sys\nsys.stdout.write('x' * 20_000_000)\nsys.stdout.flush()")
        self.assertEqual(reply["content"]["status"], "ok")
        text = stdout_of(messages)
        self.assertEqual(len(text), 20_000_000)
        self.assertEqual(text.count("x"), 20_000_000)

    def test_many_outputs_arrive_complete_and_in_order(self):
        reply, messages = self.run_cell("for i in range(5000): print(i)")
        self.assertEqual(reply["content"]["status"], "ok")
        self.assertEqual(stdout_of(messages), "".join("%d\n" % i for i in range(5000)))


class NotebookThroughAttachTest(unittest.TestCase):
    def test_notebook_outputs_are_saved(self):
        import base64
        import nbformat
        from nbclient import NotebookClient

        nb = nbformat.v4.new_notebook()
        nb.cells = [
            nbformat.v4.new_code_cell("import matplotlib\nmatplotlib.use('agg')\nimport matplotlib.pyplot as plt\n"
                                      "plt.plot([0, 1], [1, 0])\nplt.show()"),
            nbformat.v4.new_code_cell("raise RuntimeError('expected failure')"),
            nbformat.v4.new_code_cell("answer = input('your name? ')"),
            nbformat.v4.new_code_cell("print('after the errors')\n21 * 2"),
        ]
        NotebookClient(nb, kernel_name=SPEC, timeout=120, allow_errors=True).execute()
        path = os.path.join(dirs["root"], "run.ipynb")
        nbformat.write(nb, path)
        saved = nbformat.read(path, as_version=4)
        nbformat.validate(saved)
        plot, raising, asking, plain = saved.cells
        images = [o for o in plot.outputs if o.output_type == "display_data" and "image/png" in o.data]
        self.assertEqual(len(images), 1, plot.outputs)
        self.assertTrue(base64.b64decode(images[0].data["image/png"]).startswith(b"\x89PNG"))
        self.assertEqual([(o.output_type, o.ename, o.evalue) for o in raising.outputs],
                         [("error", "RuntimeError", "expected failure")])
        self.assertEqual([(o.output_type, o.ename) for o in asking.outputs], [("error", "StdinNotImplementedError")])
        self.assertEqual([o.output_type for o in plain.outputs], ["stream", "execute_result"])
        self.assertEqual(plain.outputs[0].text, "after the errors\n")
        self.assertEqual(plain.outputs[1].data["text/plain"], "42")
        # The sandbox's kernel is shared: its count goes on from earlier cells, one per cell here.
        self.assertEqual(plain.execution_count, plot.execution_count + 3)


class AttachProcessTest(unittest.TestCase):
    """attach run by hand: its own connection file, several frontends, endings."""

    def attach(self, box=BOX, path=None):
        attached = Attach(box, path)
        self.addCleanup(attached.close)
        return attached

    def test_fresh_connection_file_and_hint(self):
        attached = self.attach()
        self.assertTrue(attached.path.startswith(dirs["runtime"] + "/kernel-gpubox-" + dirs["box"]))
        self.assertEqual(os.stat(attached.path).st_mode & 0o777, 0o600)
        self.assertEqual(attached.hint.split(), ["connect", "with:", "jupyter", "console", "--existing", attached.path])
        with open(attached.path) as f:
            info = json.load(f)
        self.assertEqual(info["ip"], "127.0.0.1")
        self.assertEqual(len(info["key"]), 64)
        # Heartbeat: echoed while the relay is up.
        context = zmq.Context.instance()
        ping = context.socket(zmq.REQ)
        ping.linger = 0
        ping.connect("tcp://127.0.0.1:%d" % info["hb_port"])
        ping.send(b"ping")
        self.assertTrue(ping.poll(5000), "no heartbeat echo")
        self.assertEqual(ping.recv(), b"ping")
        ping.close()
        # A message signed with another key is dropped (and said so), never answered.
        forged = BlockingKernelClient()
        forged.load_connection_file(attached.path)
        forged.session.key = b"not-the-key"
        forged.start_channels()
        try:
            forged.kernel_info()
            with self.assertRaises(queue.Empty):
                forged.get_shell_msg(timeout=2)
        finally:
            forged.stop_channels()
        attached.process.send_signal(signal.SIGTERM)
        code, stderr = attached.wait()
        self.assertEqual(code, 0, stderr)
        self.assertIn("signature does not match", stderr)
        self.assertFalse(os.path.exists(attached.path), "attach removes the connection file it wrote")

    def test_two_frontends_at_once(self):
        attached = self.attach()
        a, b = attached.client(), attached.client()
        self.addCleanup(a.stop_channels)
        self.addCleanup(b.stop_channels)
        slow = a.execute("import time; time.sleep(0.5); print('from A')")
        fast = b.execute("print('from B')")
        reply_a, out_a = collect(a, slow)
        self.assertEqual(stdout_of(out_a), "from A\n")
        # iopub is broadcast: B sees both cells' output.
        seen_by_b, idle = [], set()
        while idle != {slow, fast}:
            msg = b.get_iopub_msg(timeout=TIMEOUT)
            parent = msg["parent_header"].get("msg_id")
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                idle.add(parent)
            elif msg["msg_type"] == "stream":
                seen_by_b.append((parent, msg["content"]["text"]))
        self.assertIn((slow, "from A\n"), seen_by_b)
        self.assertIn((fast, "from B\n"), seen_by_b)
        reply_b = b.get_shell_msg(timeout=TIMEOUT)
        self.assertEqual(reply_b["parent_header"]["msg_id"], fast)
        self.assertEqual(reply_a["parent_header"]["msg_id"], slow)
        # Each reply reached only the frontend that asked.
        for kc in (a, b):
            with self.assertRaises(queue.Empty):
                kc.get_shell_msg(timeout=0.5)
        # input() asks the frontend whose cell runs, on its own stdin channel.
        asking = a.execute("print(input('A? '))", allow_stdin=True)
        self.assertEqual(a.get_stdin_msg(timeout=TIMEOUT)["content"]["prompt"], "A? ")
        with self.assertRaises(queue.Empty):
            b.get_stdin_msg(timeout=0.5)
        a.input("only A")
        reply, out = collect(a, asking)
        self.assertEqual(stdout_of(out), "only A\n")

    def test_given_connection_file_is_served_as_written(self):
        path = os.path.join(dirs["root"], "given.json")
        ports = []
        for _ in range(5):
            s = zmq.Context.instance().socket(zmq.ROUTER)
            ports.append(s.bind_to_random_port("tcp://127.0.0.1"))
            s.close(linger=0)
        info = dict(zip(["shell_port", "iopub_port", "stdin_port", "control_port", "hb_port"], ports),
                    ip="127.0.0.1", transport="tcp", key="frontend-chosen-key", signature_scheme="hmac-sha256")
        with open(path, "w") as f:
            json.dump(info, f)
        process = subprocess.Popen([CLI, "attach", BOX, "--connection-file", path],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            kc = BlockingKernelClient()
            kc.load_connection_file(path)
            kc.start_channels()
            kc.wait_for_ready(timeout=TIMEOUT)
            reply, messages = collect(kc, kc.execute("print(6 * 7)"))
            kc.stop_channels()
            self.assertEqual(stdout_of(messages), "42\n")
            process.send_signal(signal.SIGINT)
            self.assertEqual(process.wait(timeout=20), 0)
            self.assertEqual(process.stdout.read(), "", "nothing to print: the frontend wrote the file")
            with open(path) as f:
                self.assertEqual(json.load(f), info, "a frontend's file is left as it was")
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            process.stdout.close()
            process.stderr.close()

    def test_shutdown_ends_attach_not_the_kernel_and_restart_restarts_it(self):
        km, kc = start_new_kernel(kernel_name=SPEC, startup_timeout=TIMEOUT)
        try:
            collect(kc, kc.execute("kept = 41"))
            km.restart_kernel()  # shutdown_request(restart=True): the executor restarts, attach exits and is run again
            kc.wait_for_ready(timeout=TIMEOUT)
            reply, _ = collect(kc, kc.execute("kept"))
            self.assertEqual(reply["content"]["ename"], "NameError", "a restart clears the kernel's state")
            collect(kc, kc.execute("kept = 42"))
        finally:
            kc.stop_channels()
            km.shutdown_kernel()  # shutdown_request: answered by attach, which exits
        self.assertFalse(km.is_alive())
        attached = self.attach()
        kc = attached.client()
        reply, messages = collect(kc, kc.execute("print(kept)"))
        kc.stop_channels()
        self.assertEqual(stdout_of(messages), "42\n", "the sandbox's kernel outlived the frontend's shutdown")

    def test_attach_exits_when_the_sandbox_is_terminated(self):
        box = create_sandbox("attach-doomed")
        attached = self.attach("attach-doomed")
        kc = attached.client()
        self.addCleanup(kc.stop_channels)
        reply, _ = collect(kc, kc.execute("1"))
        self.assertEqual(reply["content"]["status"], "ok")
        self.assertEqual(cli("terminate", "attach-doomed").returncode, 0)
        code, stderr = attached.wait(timeout=15)
        self.assertEqual(code, 3, stderr)
        self.assertIn("sandbox " + box, stderr)
        self.assertIn("attach stops", stderr)
        self.assertFalse(os.path.exists(attached.path))

    def test_attach_exits_when_the_agent_is_killed(self):
        box = create_sandbox("attach-killed")
        attached = self.attach("attach-killed")
        kc = attached.client()
        self.addCleanup(kc.stop_channels)
        with open(os.path.join(os.environ["XDG_STATE_HOME"], "gpubox", "sandboxes", box, "sandbox.json")) as f:
            agent_pid = json.load(f)["agent_pid"]
        os.kill(agent_pid, signal.SIGKILL)
        start = time.monotonic()
        code, stderr = attached.wait(timeout=15)
        self.assertLess(time.monotonic() - start, 5)
        self.assertEqual(code, 3, stderr)
        self.assertIn("the sandbox's agent ended", stderr)
        cli("terminate", "attach-killed")


    def test_attach_gives_up_on_an_agent_that_stops_answering(self):
        # A stopped agent still exists (as a vanished remote one might seem
        # to): its silence past 30 s, with no keepalive, ends attach.
        box = create_sandbox("attach-frozen")
        attached = self.attach("attach-frozen")
        with open(os.path.join(os.environ["XDG_STATE_HOME"], "gpubox", "sandboxes", box, "sandbox.json")) as f:
            agent_pid = json.load(f)["agent_pid"]
        os.kill(agent_pid, signal.SIGSTOP)
        try:
            start = time.monotonic()
            code, stderr = attached.wait(timeout=60)
            self.assertGreater(time.monotonic() - start, 20)
        finally:
            os.kill(agent_pid, signal.SIGCONT)
            cli("terminate", "attach-frozen")
        self.assertEqual(code, 3, stderr)
        self.assertIn("the agent sent nothing for 30 s", stderr)

    @requires(os.path.exists("/usr/bin/jupyter-console"), "needs jupyter-console (scripts/setup.sh installs it)")
    def test_jupyter_console_existing(self):
        attached = self.attach()
        done = subprocess.run(["/usr/bin/jupyter-console", "--existing", attached.path, "--simple-prompt"],
                              input="import socket\nprint(socket.gethostname(), 40 + 2)\n",
                              capture_output=True, text=True, timeout=TIMEOUT)
        self.assertIn(BOX + " 42", done.stdout, done.stderr)
        self.assertIn("keeping kernel alive", done.stdout)
        self.assertIsNone(attached.process.poll(), "the console leaves the kernel, and attach, running")

    @requires(os.path.exists("/usr/bin/jupyter-console"), "needs jupyter-console (scripts/setup.sh installs it)")
    def test_exit_in_jupyter_console_leaves_it(self):
        attached = self.attach()
        done = subprocess.run(["/usr/bin/jupyter-console", "--existing", attached.path, "--simple-prompt"],
                              input="exit\nprint('never', 6 * 7)\n", capture_output=True, text=True, timeout=TIMEOUT)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertNotIn("AttributeError", done.stdout + done.stderr)
        self.assertNotIn("never 42", done.stdout, "the console left at exit, as with ipykernel")
        self.assertIn("Shutting down kernel", done.stdout)
        code, stderr = attached.wait()  # the console's shutdown_request ends attach...
        self.assertEqual(code, 0, stderr)
        ran = cli("run-code", BOX, "print('kernel', 'alive')")  # ...not the sandbox's kernel
        self.assertEqual(ran.stdout, "kernel alive\n", ran.stderr)

    def test_more_frontends_than_the_agent_keeps_at_once(self):
        # 70 frontends, one after another, each its own routing identity: the
        # least recently used beyond 64 are closed at the agent, never refused.
        from jupyter_client.session import Session
        attached = self.attach()
        with open(attached.path) as f:
            info = json.load(f)
        session = Session(key=info["key"].encode())
        context = zmq.Context.instance()
        sockets = []
        try:
            for n in range(70):
                socket = context.socket(zmq.DEALER)
                socket.linger = 0
                socket.identity = b"frontend-%d" % n
                socket.connect("tcp://127.0.0.1:%d" % info["shell_port"])
                sockets.append(socket)
            for socket in sockets + sockets[:3]:  # the first three again, after they were closed
                sent = session.send(socket, "kernel_info_request", {})
                self.assertTrue(socket.poll(TIMEOUT * 1000), "no reply for " + socket.identity.decode())
                _, reply = session.feed_identities(socket.recv_multipart())
                reply = session.deserialize(reply)
                self.assertEqual(reply["msg_type"], "kernel_info_reply")
                self.assertEqual(reply["parent_header"]["msg_id"], sent["header"]["msg_id"])
        finally:
            for socket in sockets:
                socket.close()
        self.assertIsNone(attached.process.poll())

    def test_sandbox_without_a_kernel(self):
        config = os.path.join(dirs["root"], "no-kernel.json")
        with open(config, "w") as f:
            json.dump({"kernel": {"enabled": False}}, f)
        created = cli("create", "--name", "attach-no-kernel", "--config", config)
        self.assertEqual(created.returncode, 0, created.stderr)
        self.addCleanup(cli, "terminate", "attach-no-kernel")
        before = os.listdir(dirs["runtime"])
        done = cli("attach", "attach-no-kernel", timeout=30)
        self.assertEqual(done.returncode, 1, done.stderr)
        self.assertIn("the kernel is disabled", done.stderr)
        self.assertEqual(done.stdout, "", "no connection file is offered")
        self.assertEqual(os.listdir(dirs["runtime"]), before, "nothing is left in the runtime dir")


class BadInputTest(unittest.TestCase):
    def check_refused(self, args, expected):
        done = cli(*args)
        self.assertEqual(done.returncode, 2, (args, done.stdout, done.stderr))
        self.assertIn(expected, done.stderr)
        self.assertEqual(done.stdout, "")

    def test_attach_refuses_bad_input(self):
        self.check_refused(["attach", "no-such-box"], "no sandbox with id or name 'no-such-box'")
        self.check_refused(["attach"], "expected one sandbox id or name")
        self.check_refused(["attach", BOX, "--colour", "red"], "--colour: unknown option")
        good = {"ip": "127.0.0.1", "transport": "tcp", "key": "k", "signature_scheme": "hmac-sha256",
                "shell_port": 50001, "iopub_port": 50002, "stdin_port": 50003, "control_port": 50004, "hb_port": 50005}
        cases = [
            ("{ not json", "expected a JSON object"),
            (json.dumps(dict(good, ip="0.0.0.0")), "ip: attach serves this machine only"),
            (json.dumps({k: v for k, v in good.items() if k != "iopub_port"}), "iopub_port: expected a port"),
            (json.dumps(dict(good, hb_port=70000)), "hb_port: expected a port"),
            (json.dumps(dict(good, transport="ipc")), "transport: only \"tcp\""),
            (json.dumps(dict(good, signature_scheme="hmac-md5")), "signature_scheme: only hmac-sha256"),
        ]
        for text, expected in cases:
            path = os.path.join(dirs["root"], "bad.json")
            with open(path, "w") as f:
                f.write(text)
            self.check_refused(["attach", BOX, "--connection-file", path], expected)
            with open(path) as f:
                self.assertEqual(f.read(), text, "a refused file is left untouched")
        unreadable = os.path.join(dirs["root"], "a-directory.json")
        os.makedirs(unreadable, exist_ok=True)
        self.check_refused(["attach", BOX, "--connection-file", unreadable], "cannot read connection file")

    def test_kernelspec_refuses_bad_input(self):
        before = sorted(os.listdir(os.path.join(dirs["data"], "kernels")))
        self.check_refused(["kernelspec", "install", "--user", "--name", "bad/name"], "is not a kernel name")
        self.check_refused(["kernelspec", "install", "--user", "--sandbox", "no-such-box"], "no-such-box")
        self.check_refused(["kernelspec", "uninstall"], "expected the subcommand install")
        self.check_refused(["kernelspec", "install", "--user", "--prefix", "/tmp"], "--user and --prefix")
        self.assertEqual(sorted(os.listdir(os.path.join(dirs["data"], "kernels"))), before)


class KernelspecTest(unittest.TestCase):
    def test_sandbox_spec(self):
        with open(os.path.join(dirs["data"], "kernels", SPEC, "kernel.json")) as f:
            spec = json.load(f)
        self.assertEqual(spec["argv"], [os.path.realpath(CLI), "attach", dirs["box"], "--connection-file", "{connection_file}"])
        self.assertEqual(spec["interrupt_mode"], "message")
        self.assertEqual(spec["language"], "python")
        self.assertEqual(spec["env"], {"XDG_STATE_HOME": os.environ["XDG_STATE_HOME"]})

    def test_standalone_spec_in_a_prefix_starts_the_kernel(self):
        prefix = os.path.join(dirs["root"], "prefix")
        done = cli("kernelspec", "install", "--prefix", prefix, "--python", "/usr/bin/python3")
        self.assertEqual(done.returncode, 0, done.stderr)
        kernel_dir = os.path.join(prefix, "share", "jupyter", "kernels", "gpubox")
        self.assertIn(kernel_dir, done.stdout)
        with open(os.path.join(kernel_dir, "kernel.json")) as f:
            spec = json.load(f)
        agent = os.environ.get("GPUBOX_AGENT") or os.path.join(os.path.dirname(os.path.realpath(CLI)), "gpubox-agent")
        self.assertEqual(spec["argv"], [agent, "kernel", "-f", "{connection_file}", "--python", "/usr/bin/python3"])
        from jupyter_client.kernelspec import KernelSpecManager
        manager = KernelSpecManager(kernel_dirs=[os.path.dirname(kernel_dir)])
        km = KernelManager(kernel_name="gpubox", kernel_spec_manager=manager)
        km.start_kernel()
        kc = km.client()
        kc.start_channels()
        try:
            kc.wait_for_ready(timeout=TIMEOUT)
            reply, messages = collect(kc, kc.execute("import socket; print(socket.gethostname() != %r)" % BOX))
            self.assertEqual(stdout_of(messages), "True\n", "the standalone kernel runs here, not in a sandbox")
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=True)

    def test_user_install_honours_jupyter_data_dir(self):
        done = cli("--json", "kernelspec", "install", "--user", "--sandbox", dirs["box"], "--name", "second-name")
        self.assertEqual(done.returncode, 0, done.stderr)
        result = json.loads(done.stdout)
        self.assertEqual(result["path"], os.path.join(dirs["data"], "kernels", "second-name"))
        self.assertTrue(os.path.exists(os.path.join(result["path"], "kernel.json")))


if __name__ == "__main__":
    unittest.main()
