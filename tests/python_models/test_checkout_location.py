"""Where gpubox lives on the host does not matter (host/backends/local/runtime_binds.h): a local
sandbox hides /root and /home and has a /tmp of its own, yet an install under
/root or /tmp runs its model host and its kernel's venv. For each of the two, the
real gpubox, gpubox-agent and gpubox-modeld are copied into a fresh directory
there; modeld's RUNPATH is pointed (patchelf) at a site-packages tree in that
directory that holds the venv's torch (or, in a checkout that is itself under
/root, /home or /tmp, left at the venv's); the kernel's Python is a venv made there.
Nothing names model_host.binary or GPUBOX_AGENT: the CLI finds the agent beside
itself and the agent finds modeld beside itself. The model is mounted (--mount),
as a user's checkpoint under /root must be.
Interpreter: Debian's /usr/bin/python3 (runs the CLI; makes the kernel's venv)."""

import json
import os
import shutil
import subprocess
import tempfile
import unittest

from model_harness import AGENT, CLI, FIXTURE, MODELD, VENV_PYTHON, fixture


def venv_site_packages():
    return subprocess.run([VENV_PYTHON, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, stdout=subprocess.PIPE, text=True).stdout.strip()


class CheckoutLocationTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.refs = fixture()
        cls.torch_site = venv_site_packages()

    def install_under(self, base):
        """A copy of the runtime in a new directory under base; its path."""
        home = tempfile.mkdtemp(prefix="gbx-", dir=base)
        self.addCleanup(shutil.rmtree, home, ignore_errors=True)
        os.makedirs(os.path.join(home, "bin"))
        for program in (CLI, AGENT, MODELD):
            shutil.copy2(program, os.path.join(home, "bin", os.path.basename(program)))
        # The libraries under a hidden directory: the venv's own when this checkout is under one (modeld's
        # RUNPATH names it already), else a site-packages under base of links to the venv's packages.
        if not any(self.torch_site.startswith(hidden + "/") for hidden in ("/root", "/home", "/tmp")):
            site = os.path.join(home, "libs", "site-packages")
            os.makedirs(site)
            for entry in os.listdir(self.torch_site):
                os.symlink(os.path.join(self.torch_site, entry), os.path.join(site, entry))
            subprocess.run(["patchelf", "--set-rpath", os.path.join(site, "torch", "lib"),
                            os.path.join(home, "bin", "gpubox-modeld")], check=True)
        subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", "--system-site-packages",
                        os.path.join(home, "venv")], check=True)
        with open(os.path.join(home, "private.txt"), "w") as f:
            f.write("not for the sandbox\n")
        return home

    def check_install(self, base):
        home = self.install_under(base)
        cli = os.path.join(home, "bin", "gpubox")
        env = {k: v for k, v in os.environ.items() if k not in ("GPUBOX_AGENT", "GPUBOX_MODELD")}
        env["XDG_STATE_HOME"] = os.path.join(home, "state")

        def gpubox(*args, ok=True):
            run = subprocess.run([cli, *args], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, timeout=120)
            if ok:
                self.assertEqual(run.returncode, 0, "%s: %s" % (" ".join(args), run.stderr))
            return run

        model = os.path.relpath(self.refs["llama"], FIXTURE)
        config = os.path.join(home, "config.json")
        with open(config, "w") as f:
            json.dump({"model_host": {"models": [{"name": "tiny", "path": "/models/" + model}]},
                       "kernel": {"python": os.path.join(home, "venv", "bin", "python")}}, f)
        sandbox = gpubox("create", "--config", config, "--mount", FIXTURE + ":/models:ro").stdout.strip()
        self.addCleanup(gpubox, "terminate", sandbox, ok=False)

        gpubox("model", sandbox, "info", "tiny")  # waits until it is ready
        ids = ",".join(str(i) for i in self.refs["generate_ids"])
        out = json.loads(gpubox("model", sandbox, "generate", "tiny", "--ids", ids, "--max-new-tokens",
                                str(self.refs["new_tokens"]), "--ignore-eos", "--json").stdout)
        self.assertEqual(out["tokens"], self.refs["greedy"])

        cell = gpubox("run-code", sandbox, "import sys; print(sys.prefix)")
        self.assertEqual(cell.stdout.strip(), os.path.join(home, "venv"))

        # What came along is read-only, and nothing else of the install is there.
        listing = gpubox("exec", sandbox, "--", "ls", "/opt/gpubox/bin").stdout.split()
        self.assertEqual(listing, ["gpubox-agent", "gpubox-modeld"])
        probe = gpubox("exec", sandbox, "--", "sh", "-c",
                       "touch %s/venv/x 2>/dev/null && echo writable; "
                       "test -e %s/private.txt && echo visible; test -e %s/bin/gpubox && echo cli; echo done"
                       % (home, home, home)).stdout
        self.assertEqual(probe, "done\n")

    def test_an_install_under_root(self):
        self.check_install("/root")

    def test_an_install_under_tmp(self):
        self.check_install("/tmp")


if __name__ == "__main__":
    unittest.main()
