"""Models from inside a sample: a sandbox whose agent config has a model host serves a tiny
Llama (tests/python_models' fixture, $GPUBOX_MODEL_FIXTURE) to code the sample runs with exec,
through gpubox.Client() and the GPUBOX_ENDPOINT the provider sets; docs/inspect.md's example
task (tasks/steering_example.py) runs as written."""

import json
import os

import pytest
from inspect_ai import eval as inspect_eval

from gpubox.inspect import GpuboxSandboxConfig, GpuboxSandboxEnvironment
from private_store import PACKAGE_ENV, PACKAGE_MOUNT, REPO, missing, running, store  # noqa: F401
from tasks.steering_example import steering

FIXTURE = os.environ.get("GPUBOX_MODEL_FIXTURE") or os.path.join(REPO, "build", "tests", "model_client_fixture")

# Prints what says whether the model host loaded the model again: its pid and restarts, and how many
# requests the loaded model has served (one more per run of this script, if it is the same copy).
PROBE = """
import gpubox, json
client = gpubox.Client()
model = client.model("tiny")
model.wait_ready(timeout=120)
model.forward(ids=[1, 72, 101])
host = client.call("sys.info")["model_host"]
served = model.stats()["batching"]["requests_done"]
print(json.dumps({"pid": host["pid"], "restarts": host["restarts"], "served": served}))
"""


def model_path():
    refs = os.path.join(FIXTURE, "refs.json")
    if not os.path.exists(refs):
        missing("no model fixture at %s (ctest's model_client_fixture makes it)" % FIXTURE)
    if not os.path.exists(os.path.join(os.path.dirname(os.environ["GPUBOX_AGENT"]), "gpubox-modeld")):
        missing("no gpubox-modeld beside the agent (built only with the venv's torch)")
    with open(refs) as f:
        return json.load(f)["llama"]


def test_docs_show_the_example_task_as_it_is():
    with open(os.path.join(REPO, "docs", "inspect.md")) as f:
        doc = f.read()
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "tasks", "steering_example.py")) as f:
        assert "```python\n" + f.read() + "```\n" in doc


def test_the_example_task_steers_the_model_from_inside_its_sample(store, tmp_path):
    [log] = inspect_eval(steering(model_path=model_path()), model="mockllm/model", log_dir=str(tmp_path),
                         display="none")
    assert log.status == "success", log.error
    [sample] = log.samples
    result = sample.store["steering"]
    assert result["shape"] == [1, 5, 64]  # "Hello": 5 byte tokens, each a 64-wide residual vector of the tiny Llama
    assert result["activation_shift"] == pytest.approx([4.0, 4.0], abs=1e-4)  # 0.5 x 8 at every position
    assert result["logit_shift"] > 1e-3
    assert [s.value for s in sample.scores.values()] == ["C"]
    assert not running()


@pytest.mark.anyio
async def test_two_execs_share_one_loaded_model(store):
    config = GpuboxSandboxConfig(config={"model_host": {"models": [{"name": "tiny", "path": "/models/tiny"}]},
                                         "kernel": {"enabled": False}},
                                 mounts={"/models/tiny": model_path() + ":ro", **PACKAGE_MOUNT},
                                 env=PACKAGE_ENV, timeout=600)
    environments = await GpuboxSandboxEnvironment.sample_init("models", config, {})
    try:
        sandbox = environments["default"]
        first, second = [json.loads((await sandbox.exec(["python3", "-c", PROBE], timeout=300)).stdout)
                         for _ in range(2)]
        assert (second["pid"], second["restarts"]) == (first["pid"], 0)
        assert second["served"] > first["served"] >= 1
        shown = await sandbox.exec(["sh", "-c", "echo $GPUBOX_ENDPOINT"])
        assert shown.stdout == "ipc:///run/gpubox/rpc.sock\n"
        mine = await sandbox.exec(["sh", "-c", "echo $GPUBOX_ENDPOINT"], env={"GPUBOX_ENDPOINT": "ipc:///x"})
        assert mine.stdout == "ipc:///x\n"  # the caller's env wins
    finally:
        await GpuboxSandboxEnvironment.sample_cleanup("models", config, environments, False)
    assert not running()
