"""Budgets (host/budget/, docs/budget.md) end to end: the real `gpubox` CLI and
the real Modal SDK against the fake control plane, whose sandboxes here are
the agent run as a host process (fake_modal --process-sandboxes: no podman).
What the fake saw (its calls file) says what was dispatched: a refused create
leaves no SandboxCreate. Prices: one H100 for an hour costs $1, nothing else
costs anything, so every create with --timeout 3600 reserves exactly $1."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

from modal_harness import CLI, VENV_PYTHON, FakeModal
from prerequisite import missing

PRICES = "# test prices, not Modal's\nsource = test figures\ngpu_hour.H100 = 1\ncreate = 0\n"
DISPATCHES = ("SandboxCreate", "SandboxCreateV2")
CONTROL_BYTES = [b for b in range(0x20) if b not in (0x0a,)] + [0x7f]


def problem():
    if not CLI or not os.access(CLI, os.X_OK):
        return "GPUBOX_CLI is not set to the gpubox CLI"
    if subprocess.run([VENV_PYTHON, "-c", "import modal, grpclib"], capture_output=True).returncode != 0:
        return "%s has no modal SDK (scripts/setup_python.sh)" % VENV_PYTHON
    return ""


class BudgetCase(unittest.TestCase):
    """A fake of its own (agents as processes) and a private store per class."""

    blackhole = False

    @classmethod
    def setUpClass(cls):
        why = problem()
        if why:
            missing(why)
        cls.work = tempfile.mkdtemp(prefix="gpubox-budget-test-")
        cls.fake = FakeModal(cls.work, blackhole=cls.blackhole, process_sandboxes=True)
        cls.env = cls.environment(os.path.join(cls.work, "state"))
        cls.prices = os.path.join(cls.work, "prices.txt")
        with open(cls.prices, "w") as f:
            f.write(PRICES)

    @classmethod
    def environment(cls, state):
        env = {k: v for k, v in os.environ.items() if not k.startswith("MODAL_")}
        home = os.path.join(cls.work, "home")
        os.makedirs(home, exist_ok=True)
        env.update(HOME=home, XDG_STATE_HOME=state, MODAL_SERVER_URL=cls.fake.url, MODAL_TOKEN_ID="ak-gpubox-test",
                   MODAL_TOKEN_SECRET="as-gpubox-test", GPUBOX_PYTHON=VENV_PYTHON, PYTHONDONTWRITEBYTECODE="1")
        return env

    @classmethod
    def tearDownClass(cls):
        if not hasattr(cls, "fake"):
            return
        for state in [cls.env["XDG_STATE_HOME"]] + getattr(cls, "other_states", []):
            subprocess.run([CLI, "terminate", "--all"], env=dict(cls.env, XDG_STATE_HOME=state), capture_output=True,
                           timeout=120)
        cls.fake.stop()
        shutil.rmtree(cls.work, ignore_errors=True)

    def gpubox(self, *args, env=None, timeout=180):
        return subprocess.run([CLI, *args], env=env or self.env, capture_output=True, text=True, timeout=timeout)

    def ok(self, *args, env=None):
        ran = self.gpubox(*args, env=env)
        self.assertEqual(ran.returncode, 0, "gpubox %s: %s%s" % (" ".join(args), ran.stdout, ran.stderr))
        return ran.stdout

    def create_args(self, budget, *extra):
        return ["--json", "create", "--backend", "modal", "--gpu", "H100", "--timeout", "3600", "--ready-timeout", "60",
                "--budget", budget, *extra]

    def create(self, budget, *extra, env=None):
        return json.loads(self.ok(*self.create_args(budget, *extra), env=env))

    def refused(self, ran, budget):
        """The JSON error of a create refused by budget's ceiling."""
        self.assertEqual(ran.returncode, 1, ran.stdout + ran.stderr)
        error = json.loads(ran.stdout)["error"]
        self.assertEqual(error["code"], "budget_exceeded", error)
        self.assertIn("budget " + budget, error["message"])
        return error

    def dispatched(self):
        return sum(1 for line in self.fake.calls() if line in DISPATCHES)

    def budget(self, name, env=None):
        shown = json.loads(self.ok("budget", "--json", env=env))
        return next(b for b in shown["budgets"] if b["name"] == name), shown

    def journal(self, env=None):
        return os.path.join((env or self.env)["XDG_STATE_HOME"], "gpubox", "budget", "journal.jsonl")

    def journal_lines(self, env=None):
        with open(self.journal(env), "rb") as f:
            return f.read().count(b"\n")

    def init(self, name, max_usd, env=None):
        self.ok("budget", "init", name, "--max-usd", str(max_usd), "--prices", self.prices, env=env)

    def other_store(self, label):
        state = os.path.join(self.work, "state-" + label)
        type(self).other_states = getattr(type(self), "other_states", []) + [state]
        return dict(self.env, XDG_STATE_HOME=state)


class BudgetTest(BudgetCase):
    def test_ceiling_reached_exactly_then_refused_with_nothing_dispatched(self):
        self.init("exact", 2)
        first = self.create("exact")
        second = self.create("exact")
        self.assertEqual(first["budget"]["reserved_usd"], 1.0)
        before, lines = self.dispatched(), self.journal_lines()
        error = self.refused(self.gpubox(*self.create_args("exact")), "exact")
        self.assertIn("ceiling $2.00", error["message"])
        self.assertIn("reservation of $1.00", error["message"])
        self.assertIn("$2.00 is reserved or settled, $0.00 remains", error["message"])
        self.assertEqual(self.dispatched(), before, "the fake saw no SandboxCreate for the refused create")
        self.assertEqual(self.journal_lines(), lines, "a refusal writes nothing")
        shown, _ = self.budget("exact")
        self.assertEqual((shown["reserved_usd"], shown["left_usd"]), (2.0, 0.0))
        # The Python API refuses the same way, before anything starts.
        script = ("import sys\nfrom gpubox import Sandbox, SandboxConfig, BudgetExceeded\n"
                  "try:\n    Sandbox(SandboxConfig(backend='modal', gpu='H100', timeout=3600, budget='exact')).start()\n"
                  "except BudgetExceeded as e:\n    print('refused:', e)\n    sys.exit(0)\nsys.exit(3)\n")
        ran = subprocess.run([VENV_PYTHON, "-c", script], env=dict(self.env, GPUBOX_CLI=CLI), capture_output=True,
                             text=True, timeout=120)
        self.assertEqual(ran.returncode, 0, ran.stdout + ran.stderr)
        self.assertIn("budget exact", ran.stdout)
        self.assertEqual(self.dispatched(), before)
        for created in (first, second):
            self.ok("terminate", created["id"])

    def test_eight_concurrent_creates_against_a_ceiling_of_three_dispatch_exactly_three(self):
        self.init("race", 3)
        before = self.dispatched()
        runs = [subprocess.Popen([CLI, *self.create_args("race")], env=self.env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True) for _ in range(8)]
        results = [(run.wait(timeout=300), run.stdout.read(), run.stderr.read()) for run in runs]
        for run in runs:
            run.stdout.close()
            run.stderr.close()
        created = [json.loads(out)["id"] for code, out, _ in results if code == 0]
        refused = [json.loads(out)["error"]["code"] for code, out, _ in results if code == 1]
        self.assertEqual(len(created), 3, results)
        self.assertEqual(refused, ["budget_exceeded"] * 5, results)
        self.assertEqual(self.dispatched() - before, 3, "exactly three creates reached Modal")
        shown, _ = self.budget("race")
        self.assertEqual(shown["reserved_usd"], 3.0)
        for sandbox in created:
            self.ok("terminate", sandbox)

    def test_settle_after_terminate_returns_the_unused_part(self):
        self.init("settle", 5)
        created = self.create("settle")
        shown, report = self.budget("settle")
        self.assertEqual(shown["reserved_usd"], 1.0)
        held = [r for r in report["open_reservations"] if r["sandbox"] == created["id"]]
        self.assertEqual([r["state"] for r in held], ["live"])
        # Modal carries the reservation as a tag (reconcile's key); the record keeps only the user's tags,
        # which a snapshot's restore gives to --tag again.
        self.assertEqual(self.fake.definitions()[-1]["tags"].get("gpubox.reservation"), held[0]["reservation"])
        self.assertNotIn("gpubox.reservation", json.loads(self.ok("info", created["id"], "--json"))["spec"]["tags"])
        self.ok("terminate", created["id"])
        shown, report = self.budget("settle")
        self.assertEqual(shown["reserved_usd"], 0.0)
        self.assertGreater(shown["settled_usd"], 0.0, "it ran for some seconds at $1/h")
        self.assertLess(shown["settled_usd"], 0.1, "a sandbox that ran seconds is not charged its hour")
        self.assertAlmostEqual(shown["left_usd"], 5 - shown["settled_usd"], places=6)
        self.assertFalse([r for r in report["open_reservations"] if r["budget"] == "settle"])
        log = self.ok("budget", "log")
        self.assertRegex(log, r"settle  r-[0-9a-f]+  spent \$0\.\d+, 0\.\d+ GPU-h  'terminated by gpubox \(measured \d+ s\)'")

    def test_a_job_that_outlives_its_sandboxs_reservation_reserves_the_rest_first(self):
        self.init("jobs", 2)
        created = self.create("jobs", "--timeout", "120")
        self.ok("submit", created["id"], "--timeout", "60", "--", "true")  # inside the sandbox's 120 s: nothing more
        _, report = self.budget("jobs")
        self.assertEqual([r["kind"] for r in report["open_reservations"] if r["budget"] == "jobs"], ["create"])
        self.ok("submit", created["id"], "--timeout", "3600", "--", "true")
        shown, report = self.budget("jobs")
        jobs = [r for r in report["open_reservations"] if r["budget"] == "jobs" and r["kind"] == "job"]
        self.assertEqual(len(jobs), 1)
        self.assertAlmostEqual(jobs[0]["reserved_usd"], (3600 - 120) / 3600, delta=0.02)
        error = self.refused(self.gpubox("--json", "submit", created["id"], "--timeout", "36000", "--", "true"), "jobs")
        self.assertIn("this job's reservation", error["message"])
        listed = json.loads(self.ok("jobs", created["id"], "--json"))
        self.assertEqual(len(listed), 2, "the refused job was not sent")
        self.ok("terminate", created["id"])
        shown, _ = self.budget("jobs")
        self.assertEqual(shown["reserved_usd"], 0.0)
        self.assertLess(shown["settled_usd"], 0.1)

    def test_bad_input_is_a_usage_error_naming_the_field_and_changes_nothing(self):
        self.init("strict", 1)
        created = self.create("strict")
        lines, before = self.journal_lines(), self.dispatched()
        bad_prices = os.path.join(self.work, "bad.txt")
        cases = [("gpu_hour.H100 = nan\n", "gpu_hour.H100"), ("gpu_hour.H100 = 1\ncpu_core_hour = -2\n", "cpu_core_hour")]
        for text, field in cases:
            with open(bad_prices, "w") as f:
                f.write(text)
            ran = self.gpubox("budget", "init", "other", "--max-usd", "1", "--prices", bad_prices)
            self.assertEqual(ran.returncode, 2, ran.stderr)
            self.assertIn(field, ran.stderr)
        checks = [
            (self.create_args("nope"), "--budget nope: no such budget"),
            (["--json", "create", "--backend", "modal", "--gpu", "A10G", "--timeout", "60", "--budget", "strict"],
             "budget strict's prices have no gpu_hour.A10G"),
            (["budget", "set", "strict", "--max-usd", "0.5"], "--max-usd 0.5: below what budget strict has reserved"),
            (["budget", "set", "strict", "--max-usd", "nan"], "--max-usd 'nan'"),
            (["budget", "init", "noprices", "--max-usd", "3"], "--prices"),
            (["budget", "default", "nope"], "NAME nope: no such budget"),
        ]
        for args, words in checks:
            ran = self.gpubox(*args)
            self.assertEqual(ran.returncode, 2, "%s: %s%s" % (args, ran.stdout, ran.stderr))
            self.assertIn(words, ran.stdout + ran.stderr)
        self.assertEqual(self.journal_lines(), lines, "bad input wrote nothing")
        self.assertEqual(self.dispatched(), before, "bad input dispatched nothing")
        self.ok("terminate", created["id"])

    def test_the_log_escapes_hostile_strings(self):
        env = self.other_store("hostile")
        self.init("lab", 5, env=env)
        hostile = "evil\x1b]0;pwned\x07\x1b[2J\x9b31m\r"
        entries = [{"op": "reserve", "t": time.time(), "budget": "lab", "reservation": "r-hostile", "micro_usd": 1,
                    "micro_gpu_h": 0, "kind": "create", "backend": "modal", "sandbox": "", "name": hostile,
                    "app": hostile, "usd_per_hour": 0, "gpu_count": 0, "seconds": 1, "create_usd": 0},
                   {"op": "failed", "t": time.time(), "reservation": "r-hostile", "text": "Modal: " + hostile}]
        with open(self.journal(env), "a") as f:  # as any writer, an old gpubox or a hand edit, might leave it
            for entry in entries:
                f.write(json.dumps(entry, ensure_ascii=False) + "\n")
        for args in (["budget", "log"], ["budget"]):
            ran = subprocess.run([CLI, *args], env=env, capture_output=True, timeout=60)
            self.assertEqual(ran.returncode, 0, ran.stderr)
            shown = ran.stdout + ran.stderr
            for byte in CONTROL_BYTES + [0x9b]:
                self.assertNotIn(bytes([byte]), shown, "%s printed byte 0x%02x" % (args, byte))
            self.assertIn(b"evil\\x1b]0;pwned\\x07\\x1b[2J\\u009b31m\\x0d", shown, args)


class TornJournalTest(BudgetCase):
    def test_a_torn_journal_is_reported_sealed_and_never_dropped(self):
        self.init("torn", 5)
        with open(self.journal(), "a") as f:
            f.write('{"op":"reserve","t":1,"budget":"torn","reservation":"r-half","micro_us')  # a writer died in write()
        ran = self.gpubox("budget")
        self.assertEqual(ran.returncode, 0, ran.stderr)
        self.assertRegex(ran.stderr, r"journal\.jsonl line 2: torn")
        report = json.loads(self.ok("budget", "--json"))
        self.assertEqual([(p["line"], p["what"][:5]) for p in report["problems"]], [(2, "torn:")])
        self.assertIn("line 2: torn", self.ok("budget", "log"))
        # The next writer seals it: the torn bytes stay, a line after them says what they were.
        created = self.create("torn")
        with open(self.journal()) as f:
            lines = f.read().splitlines()
        self.assertTrue(lines[1].startswith('{"op":"reserve","t":1,"budget":"torn","reservation":"r-half"'))
        self.assertEqual(json.loads(lines[2])["op"], "torn")
        self.assertEqual(json.loads(lines[2])["line"], 2)
        report = json.loads(self.ok("budget", "--json"))
        self.assertIn("torn (sealed at line 3)", report["problems"][0]["what"])
        shown = next(b for b in report["budgets"] if b["name"] == "torn")
        self.assertEqual(shown["reserved_usd"], 1.0, "the torn reservation was never made; the create's was")
        self.ok("terminate", created["id"])


class CrashBetweenReserveAndConfirmTest(BudgetCase):
    blackhole = True  # the create reaches Modal, then waits for an agent that never answers

    def test_the_cli_killed_mid_create_leaves_a_reservation_that_reconcile_settles(self):
        self.init("crash", 5)
        before = self.dispatched()
        run = subprocess.Popen([CLI, *self.create_args("crash")], env=self.env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
        give_up = time.monotonic() + 120
        while self.dispatched() == before:  # the fake's record of the dispatch is what we wait on
            self.assertIsNone(run.poll(), "the create ended before it reached Modal")
            self.assertLess(time.monotonic(), give_up, "the create never reached Modal")
            time.sleep(0.1)
        os.killpg(run.pid, signal.SIGKILL)  # the CLI and its Modal helper, between dispatch and confirm
        run.wait(timeout=30)
        shown, report = self.budget("crash")
        self.assertEqual(shown["reserved_usd"], 1.0, "an uncertain create keeps its whole reservation")
        [held] = [r for r in report["open_reservations"] if r["budget"] == "crash"]
        self.assertTrue(held["state"].startswith("uncertain: never confirmed"), held)
        done = json.loads(self.ok("budget", "reconcile", "--json"))
        [item] = [i for i in done["reservations"] if i["reservation"] == held["reservation"]]
        self.assertEqual(item["action"], "linked", done)
        self.assertIn("running on Modal as sb-", item["detail"])
        sandbox = item["detail"].split("gpubox terminate ")[1].split("`")[0]
        self.assertEqual(self.dispatched() - before, 1, "reconcile never creates or retries")
        shown, _ = self.budget("crash")
        self.assertEqual(shown["reserved_usd"], 1.0, "still running: still held")
        self.ok("terminate", sandbox)
        self.assertIn("SandboxTerminate", self.fake.calls())
        shown, report = self.budget("crash")
        self.assertEqual(shown["reserved_usd"], 0.0)
        self.assertGreater(shown["settled_usd"], 0.0)
        self.assertLessEqual(shown["settled_usd"], 1.0)
        self.assertIn("no open reservation", self.ok("budget", "reconcile"))


class LocalBackendBudgetTest(BudgetCase):
    """The local backend through the same reservation (price 0, a GPU-hour ceiling); this machine has no GPU."""

    def test_a_local_create_is_reserved_confirmed_and_settled_by_the_same_mechanism(self):
        env = self.other_store("local")
        self.ok("budget", "init", "rig", "--max-gpu-hours", "2", env=env)
        ran = self.gpubox("--json", "create", "--budget", "rig", env=env)
        self.assertEqual(ran.returncode, 2, ran.stdout)
        self.assertIn("--timeout: a sandbox under budget rig needs one", json.loads(ran.stdout)["error"]["message"])
        created = json.loads(self.ok("--json", "create", "--budget", "rig", "--timeout", "600", env=env))
        self.assertEqual(created["budget"]["reserved_usd"], 0.0)
        self.assertEqual(created["budget"]["reserved_gpu_hours"], 0.0, "no GPU asked for: no GPU-hour held")
        _, report = self.budget("rig", env=env)
        [held] = [r for r in report["open_reservations"] if r["budget"] == "rig"]
        self.assertEqual((held["backend"], held["sandbox"], held["state"]), ("local", created["id"], "live"))
        self.ok("terminate", created["id"], env=env)
        shown, report = self.budget("rig", env=env)
        self.assertEqual((shown["reserved_gpu_hours"], shown["settled_gpu_hours"], shown["left_gpu_hours"]), (0.0, 0.0, 2.0))
        self.assertFalse(report["open_reservations"])
        self.assertIn("terminated by gpubox (measured", self.ok("budget", "log", env=env))


class McpBudgetTest(BudgetCase):
    def call(self, process, id, method, params):
        process.stdin.write(json.dumps({"jsonrpc": "2.0", "id": id, "method": method, "params": params}) + "\n")
        process.stdin.flush()
        while True:
            message = json.loads(process.stdout.readline())
            if message.get("id") == id:
                return message

    def test_mcp_refuses_as_the_cli_does_and_shows_the_budget(self):
        self.init("agent", 1)
        created = self.create("agent")
        process = subprocess.Popen([CLI, "mcp"], env=self.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL, text=True)
        try:
            self.call(process, 0, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                                 "clientInfo": {"name": "budget-test", "version": "1"}})
            process.stdin.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n")
            process.stdin.flush()
            shown = self.call(process, 1, "tools/call", {"name": "show_budget", "arguments": {}})["result"]
            agent = next(b for b in shown["structuredContent"]["budgets"] if b["name"] == "agent")
            self.assertEqual((agent["max_usd"], agent["reserved_usd"], agent["left_usd"]), (1.0, 1.0, 0.0))
            cli = self.gpubox("--json", "create", "--budget", "nope")
            refused = self.call(process, 2, "tools/call", {"name": "create_sandbox", "arguments": {"budget": "nope"}})
            self.assertTrue(refused["result"]["isError"])
            # The CLI's refusal, in the tool's argument names ("budget", not "--budget").
            in_tool_words = json.loads(cli.stdout)["error"]["message"].replace("--budget", "budget")
            self.assertIn(in_tool_words, refused["result"]["structuredContent"]["error"])
            self.assertNotIn("--", refused["result"]["structuredContent"]["error"])
            self.assertEqual(refused["result"]["structuredContent"]["details"]["code"], "usage")
        finally:
            process.stdin.close()
            process.wait(timeout=60)
            process.stdout.close()
        self.ok("terminate", created["id"])


if __name__ == "__main__":
    unittest.main()
