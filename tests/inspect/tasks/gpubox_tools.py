"""gpubox_tools: 16 samples in which a scripted mockllm agent (react, with Inspect's bash() and python()
tools) writes the sample's token to a file with bash, reads it back reversed with python and submits
what python printed; the scorer checks the answer and the file left in the sandbox.

    inspect eval tests/inspect/tasks/gpubox_tools.py --sandbox gpubox [-T samples=16] [-T sleep=0]

The model is part of the task (mockllm/model with a script), so every sample scores C when the
sandbox works, whatever --model says. sleep=S makes the bash step sleep S seconds (a slow sample)."""

import json

from inspect_ai import Task, task
from inspect_ai.agent import AgentSubmit, react
from inspect_ai.dataset import Sample
from inspect_ai.model import ChatMessageTool, ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import CORRECT, INCORRECT, Score, Target, accuracy, scorer
from inspect_ai.solver import TaskState
from inspect_ai.tool import bash, python
from inspect_ai.util import sandbox

ANSWER_FILE = "answer.txt"


def token(index: int) -> str:
    return "gpubox-%02d-%d" % (index, (index * 7919) % 1009)


def _call(tool: str, arguments: dict) -> ModelOutput:
    """A tool call, with its usage given: mockllm would otherwise count tokens with tiktoken (a download)."""
    output = ModelOutput.for_tool_call("mockllm", tool, arguments)
    output.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
    return output


def _script(sleep: float):
    """The agent's next move, from the conversation so far: bash, python, then submit."""

    def next_output(messages, tools, tool_choice, config) -> ModelOutput:
        results = [m for m in messages if isinstance(m, ChatMessageTool)]
        if not results:
            value = json.loads(messages[-1].text)["token"]
            command = "printf %%s %s > %s" % (value, ANSWER_FILE)
            if sleep:
                command += " && sleep %g" % sleep
            return _call("bash", {"command": command})
        if len(results) == 1:
            code = "print(open(%r).read()[::-1])" % ANSWER_FILE
            return _call("python", {"code": code})
        return _call("submit", {"answer": results[-1].text.strip()})

    return next_output


@scorer(metrics=[accuracy()])
def reversed_token():
    """C when the answer is the token reversed and the sandbox still holds the token in ANSWER_FILE."""

    async def score(state: TaskState, target: Target) -> Score:
        stored = await sandbox().read_file(ANSWER_FILE)
        answer = state.output.completion.strip()
        right = answer == target.text and stored == target.text[::-1]
        return Score(value=CORRECT if right else INCORRECT, answer=answer,
                     explanation="answer %r, %s holds %r" % (answer, ANSWER_FILE, stored))

    return score


@task
def gpubox_tools(samples: int = 16, sleep: float = 0):
    dataset = [Sample(id=i, input=json.dumps({"token": token(i)}), target=token(i)[::-1])
               for i in range(int(samples))]
    agent = react(tools=[bash(timeout=120), python(timeout=120)], submit=AgentSubmit(answer_only=True))
    return Task(dataset=dataset, solver=agent,
                scorer=reversed_token(), model=get_model("mockllm/model", custom_outputs=_script(float(sleep))),
                message_limit=20)
