"""The Modal backend's figures in the fake-control-plane setup, beside the
podman backend's from the same run: `gpubox create` to ready (the agent
answering sys.ping through the tunnel), `gpubox exec ID -- true`, and one
sys.ping round trip from Python. A program, not a test:

    build/venv/bin/python tests/bench/modal_bench.py [--runs N]

Needs what tests/modal needs (podman, the base images of
scripts/setup_images.sh, build/venv with modal); the podman figures need the
image the podman tests build (localhost/gpubox-test-python). The fake's
sandboxes are local containers, so these figures are what gpubox adds (the
SDK's calls, the image definition, the secret, the tunnel, CURVE), not
Modal's own scheduling and container start."""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "modal"))
sys.path.insert(0, os.path.join(ROOT, "python"))
os.environ.setdefault("GPUBOX_CLI", os.path.join(ROOT, "build", "bin", "gpubox"))

import gpubox  # noqa: E402
import modal_harness  # noqa: E402


def timed(argv, env):
    started = time.perf_counter()
    ran = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    if ran.returncode != 0:
        raise SystemExit("%s: %s" % (" ".join(argv), ran.stderr))
    return time.perf_counter() - started, ran.stdout.strip()


def ping_us(name, env, count=200):
    os.environ["XDG_STATE_HOME"] = env["XDG_STATE_HOME"]
    with gpubox.connect(name) as client:
        samples = []
        for _ in range(count):
            started = time.perf_counter()
            client.call("sys.ping")
            samples.append((time.perf_counter() - started) * 1e6)
    return statistics.median(samples)


def backend_figures(label, create_args, env, runs):
    creates, execs, pings = [], [], []
    for index in range(runs):
        seconds, sandbox = timed([modal_harness.CLI, "create", *create_args, "--name", "%s%d" % (label, index)], env)
        creates.append(seconds * 1000)
        for _ in range(5):
            execs.append(timed([modal_harness.CLI, "exec", sandbox, "--", "true"], env)[0] * 1000)
        pings.append(ping_us(sandbox, env))
        timed([modal_harness.CLI, "terminate", sandbox], env)
    return statistics.median(creates), statistics.median(execs), statistics.median(pings)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    why = modal_harness.problem()
    if why:
        raise SystemExit("modal_bench: " + why)
    work = tempfile.mkdtemp(prefix="gpubox-modal-bench-")
    fake = modal_harness.FakeModal(work)
    try:
        env = dict(os.environ, XDG_STATE_HOME=os.path.join(work, "state"), MODAL_SERVER_URL=fake.url,
                   MODAL_TOKEN_ID="ak-bench", MODAL_TOKEN_SECRET="as-bench", GPUBOX_PYTHON=modal_harness.VENV_PYTHON)
        modal_args = ["--backend", "modal", "--image", modal_harness.IMAGE]
        first, sandbox = timed([modal_harness.CLI, "create", *modal_args], env)  # uploads the agent once
        timed([modal_harness.CLI, "terminate", sandbox], env)
        rows = [("modal (fake control plane)",) + backend_figures("m", modal_args, env, args.runs)]
        podman_image = modal_harness.IMAGE
        if modal_harness.podman("image", "exists", podman_image).returncode == 0:
            rows.append(("podman",) + backend_figures("p", ["--backend", "podman", "--image", podman_image], env,
                                                      args.runs))
        print("first modal create (uploads the %d MB agent): %.0f ms" %
              (os.path.getsize(os.environ.get("GPUBOX_AGENT", os.path.join(ROOT, "build", "bin", "gpubox-agent")))
               // 1000000, first * 1000))
        print("%-28s %14s %16s %14s" % ("backend", "create p50 ms", "exec true p50 ms", "sys.ping p50 us"))
        for name, create, run, ping in rows:
            print("%-28s %14.0f %16.1f %14.0f" % (name, create, run, ping))
        if len(rows) == 2:
            print("modal / podman: create %.2fx, exec %.2fx, ping %.2fx" %
                  (rows[0][1] / rows[1][1], rows[0][2] / rows[1][2], rows[0][3] / rows[1][3]))
    finally:
        fake.stop()


if __name__ == "__main__":
    main()
