"""The README's "First five minutes", run as written, and `gpubox --version`.

The command block is read from README.md itself (its first line, which
installs and builds, is what this test already has: the built gpubox on
PATH); every other line runs in bash in a fresh directory, one at a time,
on a terminal (a pty) so that `exec -it` gets one, and must exit 0.
Run by ctest (cli_readme) with Debian's /usr/bin/python3; needs root and
GPUBOX_CLI naming the built binary (its directory holds gpubox-agent).
"""

import json
import os
import pty
import re
import select
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from local_children import become_subreaper, reap_orphans  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from prerequisite import requires  # noqa: E402

CLI = os.environ.get("GPUBOX_CLI", "")
README = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "README.md")


def setUpModule():
    become_subreaper()  # the agents the CLI detaches are reaped here, as init would


def first_five_minutes():
    """The command lines of README.md's "First five minutes" block, after the install line and its comments."""
    with open(README, encoding="utf-8") as f:
        text = f.read()
    section = text[text.index("## First five minutes"):]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    lines = [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert lines[0].startswith("scripts/demo.sh"), lines[0]
    return lines[1:]


def run_on_terminal(command, cwd, env, timeout=120):
    """(exit status, output) of bash -c command on a new pty; a shell it opens gets 'exit'."""
    master, slave = pty.openpty()
    process = subprocess.Popen(["bash", "-c", command], cwd=cwd, env=env, stdin=slave, stdout=slave, stderr=slave,
                               start_new_session=True)
    os.close(slave)
    output, said_exit = b"", False
    give_up = time.monotonic() + timeout
    try:
        while time.monotonic() < give_up:
            ready = select.select([master], [], [], 0.2)[0]
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the last holder of the pty's other end exited
                    break
                if not chunk:
                    break
                output += chunk
            if not said_exit and re.search(rb"[#$] $", output):  # a shell's prompt: leave it
                os.write(master, b"exit\r")
                said_exit = True
            if process.poll() is not None and not ready:
                break
        status = process.wait(timeout=max(1, give_up - time.monotonic()))
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(master)
    return status, output.decode(errors="replace")


@requires(CLI and os.geteuid() == 0, "needs GPUBOX_CLI and root")
class ReadmeTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="gpubox-readme-")
        self.env = dict(os.environ, XDG_STATE_HOME=os.path.join(self.dir, "state"),
                        PATH=os.path.dirname(CLI) + os.pathsep + os.environ.get("PATH", ""))
        self.work = os.path.join(self.dir, "work")
        os.makedirs(self.work)

    def tearDown(self):
        subprocess.run([CLI, "terminate", "--all"], env=self.env, capture_output=True, timeout=60)
        reap_orphans()
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_first_five_minutes_as_written(self):
        lines = first_five_minutes()
        self.assertTrue(any(line.startswith("gpubox submit box --input data/") for line in lines))
        outputs = {}
        for line in lines:
            status, output = run_on_terminal(line, self.work, self.env)
            self.assertEqual(status, 0, "%s\n%s" % (line, output))
            outputs[line.split("#")[0].strip()] = output
        said = "\n".join(outputs.values())
        self.assertIn("42", outputs["gpubox exec box -- python3 -c 'print(6 * 7)'"])
        self.assertIn(sys.version.split()[0], said)  # run-code printed the kernel's sys.version
        self.assertIn("job-1", said)
        with open(os.path.join(self.work, "box-job-1", "out", "counts.txt")) as f:
            self.assertEqual(f.read().split(), ["100", "data/numbers.txt"])
        listed = subprocess.run([CLI, "ls", "--json"], env=self.env, capture_output=True, text=True, timeout=60)
        self.assertEqual([s for s in json.loads(listed.stdout) if s.get("state") == "running"], [])  # terminated

    def test_version(self):
        text = subprocess.run([CLI, "--version"], capture_output=True, text=True, timeout=30)
        self.assertEqual(text.returncode, 0, text.stderr)
        self.assertRegex(text.stdout, r"^gpubox \S+ \(agent protocol 1\)\n$")
        as_json = subprocess.run([CLI, "--json", "--version"], capture_output=True, text=True, timeout=30)
        self.assertEqual(as_json.returncode, 0, as_json.stderr)
        version = json.loads(as_json.stdout)
        self.assertEqual(version["protocol_version"], 1)
        self.assertIn(version["version"], text.stdout)


if __name__ == "__main__":
    unittest.main()
