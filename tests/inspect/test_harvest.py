"""Harvest: jobs a sample submits (from inside its sandbox, through gpubox.Client()) are
downloaded by harvest_outputs, which records them in the sample's store(), and at
sample_cleanup into the config's harvest=DIR, as DIR/SANDBOX_ID/JOB_ID."""

import json
import os

from inspect_ai import Task, eval as inspect_eval
from inspect_ai.dataset import Sample
from inspect_ai.solver import solver
from inspect_ai.util import sandbox

from gpubox.inspect import GpuboxSandboxConfig, harvest_outputs
from private_store import PACKAGE_ENV, PACKAGE_MOUNT, running, store  # noqa: F401

# Submits a job through the agent's RPC from inside the sandbox and waits for it; prints its record.
SUBMIT = """
import gpubox, json, sys
client = gpubox.Client()
job = client.call("job.submit", command=sys.argv[1], timeout_seconds=60)
print(json.dumps(client.call("job.wait", job_id=job["job_id"], timeout_s=60)))
"""
FIRST = "echo 42 > out/answer.txt; head -c 5000 /dev/zero > out/big.txt; echo done"
SECOND = "echo late > out/late.txt; exit 3"


async def submit(command):
    ran = await sandbox().exec(["python3", "-c", SUBMIT, command], timeout=120)
    assert ran.success, ran.stderr
    return json.loads(ran.stdout)


@solver
def two_jobs():
    """Runs FIRST, harvests it into the store, then runs SECOND (left for sample_cleanup's harvest)."""
    async def solve(state, generate):
        await submit(FIRST)
        await harvest_outputs()
        await submit(SECOND)
        return state
    return solve


def test_jobs_are_harvested_into_the_store_and_the_harvest_dir(store, tmp_path):
    harvest = tmp_path / "harvest"
    config = GpuboxSandboxConfig(harvest=str(harvest), mounts=PACKAGE_MOUNT, env=PACKAGE_ENV, timeout=600)
    task = Task(dataset=[Sample(input="x")], solver=two_jobs(), sandbox=("gpubox", config))
    [log] = inspect_eval(task, model="mockllm/model", log_dir=str(tmp_path / "logs"), display="none")
    assert log.status == "success", log.error
    [sample] = log.samples

    [sandbox_id] = os.listdir(harvest)
    recorded = sample.store["gpubox_jobs"]
    assert list(recorded) == ["job-1"]  # the second job was not submitted yet
    assert recorded["job-1"]["status"] == "succeeded"
    assert recorded["job-1"]["dir"] == str(harvest / sandbox_id / "job-1")
    assert recorded["job-1"]["files"] == {
        "out/answer.txt": {"size": 3, "text": "42\n"},
        "out/big.txt": {"size": 5000},  # past harvest_outputs' text_bytes (4096): its size only
        "stderr.log": {"size": 0, "text": ""},
        "stdout.log": {"size": 5, "text": "done\n"},
    }
    # sample_cleanup harvested the second job too, beside the first (which it did not download again).
    assert sorted(os.listdir(harvest / sandbox_id)) == ["job-1", "job-2"]
    assert (harvest / sandbox_id / "job-2" / "out" / "late.txt").read_text() == "late\n"
    assert not running()
