"""Interrupt-then-execute rounds, shared by the standalone kernel's, the agent's
and `gpubox attach`'s suites: a cell runs, an interrupt lands at some moment of
it (during time.sleep, a busy loop, blocking C code, C code that only checks for
signals when it returns, heavy output, the very end of a quick cell, or after
the cell ended), and the next cell is sent the moment the first one's reply
arrives, before anything is read from iopub. That next cell must always run:
an ok reply with its result, and busy, execute_input, execute_result, idle
under its own parent. Rounds are drawn from a seeded generator, so a failure
names a round that can be replayed."""
import os
import queue
import random
import re
import time

# (name, code, how long after sending it the interrupt fires, in seconds)
VARIANTS = [
    ("sleep", "import time; time.sleep(30)", (0.05, 0.3)),
    ("busy loop", "while True: pass", (0.05, 0.3)),
    ("blocking C call", "import os; _r, _w = os.pipe(); os.read(_r, 1)", (0.05, 0.3)),
    ("C code that checks signals only at its end", "sum(range(10**7))", (0.0, 0.2)),
    ("heavy output", "import sys\nwhile True: sys.stdout.write('y' * 8191 + '\\n')", (0.02, 0.1)),
    ("the very end of a quick cell", "_x = sum(range(1000))", (0.0, 0.01)),
    ("after the cell ended", "_y = 1", None),
]


def plain_text(traceback_lines):
    """A traceback's lines as one text, without IPython's ANSI colours."""
    return re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(traceback_lines))


def rounds(count, seed):
    """count (round number, variant) pairs, every variant drawn in turn; under the
    sanitizers' build (GPUBOX_ROUNDS_SCALE, set by CMake) a fifth as many."""
    scale = float(os.environ.get("GPUBOX_ROUNDS_SCALE", "1"))
    count = max(len(VARIANTS), int(count * scale))
    generator = random.Random(seed)
    for number in range(count):
        name, code, delays = VARIANTS[number % len(VARIANTS)]
        delay = None if delays is None else generator.uniform(*delays)
        yield number, name, code, delay


def wait_for_reply(kc, msg_id, timeout):
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError("no execute_reply within %ss" % timeout)
        try:
            reply = kc.get_shell_msg(timeout=remaining)
        except queue.Empty:
            raise AssertionError("no execute_reply within %ss" % timeout) from None
        if reply["parent_header"].get("msg_id") == msg_id:
            return reply


def wait_for_busy(kc, msg_id, timeout):
    """Reads iopub up to msg_id's busy status (nothing before it belongs to this round)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            msg = kc.get_iopub_msg(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            continue
        if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "status":
            return
    raise AssertionError("no busy status within %ss" % timeout)


def iopub_of(kc, msg_ids, timeout):
    """Every iopub message of each of msg_ids up to its idle status, by msg_id."""
    pending = {msg_id: [] for msg_id in msg_ids}
    done = set()
    deadline = time.monotonic() + timeout
    while len(done) < len(pending):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError("no idle status within %ss for %s" % (timeout, sorted(set(pending) - done)))
        try:
            msg = kc.get_iopub_msg(timeout=remaining)
        except queue.Empty:
            continue
        parent = msg["parent_header"].get("msg_id")
        if parent not in pending or parent in done:
            continue
        pending[parent].append(msg)
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            done.add(parent)
    return pending


def run_jupyter_rounds(test, kc, interrupt, count, seed, timeout=60, settle=0.0):
    """Drives count rounds through a jupyter_client kc; interrupt() fires one interrupt.
    settle: how long to wait after an interrupt sent between cells before the next
    cell (a signal carries no time, so the kernel can only order it by arrival)."""
    wait_for_reply(kc, kc.execute("None"), timeout)  # the executor has started: an interrupt finds the cell
    for number, name, code, delay in rounds(count, seed):
        context = "round %d (%s, interrupt after %s s)" % (number, name, delay)
        first = kc.execute(code)
        try:
            if delay is not None:
                if delay >= 0.02:  # a long cell: interrupted while it runs (the kernel has taken it)
                    wait_for_busy(kc, first, timeout)
                time.sleep(delay)
                interrupt()
            reply = wait_for_reply(kc, first, timeout)
            if delay is None:
                interrupt()  # between cells: dropped
                time.sleep(settle)
            second = kc.execute("%d + 1" % number)  # at once, before iopub is read
            next_reply = wait_for_reply(kc, second, timeout)
            messages = iopub_of(kc, [first, second], timeout)
        except AssertionError as error:  # a wait that ran out: say which round
            raise AssertionError("%s: %s" % (context, error)) from None
        content = reply["content"]
        test.assertIn(content["status"], ("ok", "error"), context)
        if content["status"] == "error":
            test.assertEqual(content.get("ename"), "KeyboardInterrupt", context)
        test.assertEqual(next_reply["content"]["status"], "ok", "%s: %s" % (context, next_reply["content"]))
        kinds = [m["msg_type"] for m in messages[second]]
        test.assertEqual(kinds[0], "status", context)
        test.assertEqual(messages[second][0]["content"]["execution_state"], "busy", context)
        test.assertEqual(kinds[1:], ["execute_input", "execute_result", "status"], context)
        result = messages[second][2]["content"]
        test.assertEqual(result["data"]["text/plain"], str(number + 1), context)
        test.assertEqual(result["execution_count"], next_reply["content"]["execution_count"], context)
