"""docs/inspect.md's example: a task whose sample steers a model from inside its gpubox sandbox.

    inspect eval tests/inspect/tasks/steering_example.py -T model_path=/path/to/a/model --model mockllm/model

The sandbox's model host loads the model once; the solver runs a script in the sandbox that reads
the residual stream at HOOK, then runs again with STEER added there (model.run's add=), and the
scorer checks that the steering moved both the activation (by exactly scale x vector) and the logits.
"""

import json
import os

import gpubox
from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.scorer import CORRECT, INCORRECT, Score, Target, accuracy, scorer
from inspect_ai.solver import Generate, TaskState, solver
from inspect_ai.util import sandbox, store

from gpubox.inspect import GpuboxSandboxConfig

HOOK = "blocks.0.hook_resid_post"
SCALE = 8.0  # the vector is 0.5 in every dimension: the activation moves by 4.0 everywhere

# Run by the sandbox's python3: gpubox.Client() finds the agent through GPUBOX_ENDPOINT, which the
# provider's exec sets; the model host serves "tiny" to it (and to any other process of the sandbox).
STEER = """
import gpubox, json
model = gpubox.Client().model("tiny")
model.wait_ready(timeout=120)
ids = model.tokenize("Hello")["ids"]
plain = model.run(ids=ids, capture=[HOOK], last_only=True)
vector = plain[HOOK][0, -1] * 0 + 0.5
steered = model.run(ids=ids, capture=[HOOK], last_only=True, add={HOOK: (vector, SCALE)})
print(json.dumps({
    "shape": list(plain[HOOK].shape),
    "activation_shift": [float((steered[HOOK] - plain[HOOK]).min()), float((steered[HOOK] - plain[HOOK]).max())],
    "logit_shift": float(abs(steered["logits"] - plain["logits"]).max()),
    "top_token": [int(plain["logits"][0, -1].argmax()), int(steered["logits"][0, -1].argmax())],
}))
""".replace("HOOK", repr(HOOK)).replace("SCALE", repr(SCALE))


@solver
def steer():
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        ran = await sandbox().exec(["python3", "-c", STEER], timeout=300)
        if not ran.success:
            raise RuntimeError("the steering script failed: " + ran.stderr)
        store().set("steering", json.loads(ran.stdout))
        return state
    return solve


@scorer(metrics=[accuracy()])
def steered():
    async def score(state: TaskState, target: Target) -> Score:
        result = store().get("steering")
        low, high = result["activation_shift"]
        moved = abs(low - 0.5 * SCALE) < 1e-3 and abs(high - 0.5 * SCALE) < 1e-3 and result["logit_shift"] > 1e-3
        return Score(value=CORRECT if moved else INCORRECT, explanation=json.dumps(result))
    return score


@task
def steering(model_path: str):
    """model_path: a model directory the model host can load (safetensors + config.json + tokenizer)."""
    config = GpuboxSandboxConfig(
        backend="local",
        config={"model_host": {"models": [{"name": "tiny", "path": "/models/tiny"}]}, "kernel": {"enabled": False}},
        # A local sandbox sees neither /root nor /home: the model and the gpubox package this process
        # runs are mounted in, read-only (an image or a Modal sandbox has the package installed instead).
        mounts={"/models/tiny": model_path + ":ro",
                "/opt/gpubox-python/gpubox": os.path.dirname(os.path.abspath(gpubox.__file__)) + ":ro"},
        env={"PYTHONPATH": "/opt/gpubox-python"},
        timeout=900,
    )
    return Task(dataset=[Sample(input="steer the model")], solver=steer(), scorer=steered(),
                sandbox=("gpubox", config))
