"""Bad input to the provider: a config pydantic refuses (naming the field), a create gpubox refuses
(the sample fails with gpubox's message, nothing left running), a budget that cannot hold the create
(the sample's error in the eval log is the budget's message), and a cleanup of an unknown id."""

import pytest
from inspect_ai import Task, eval as inspect_eval
from inspect_ai.dataset import Sample
from pydantic import ValidationError

from gpubox.inspect import GpuboxSandboxConfig, GpuboxSandboxEnvironment
from gpubox.sandbox import BudgetExceeded, SandboxError, run_cli
from private_store import running, store  # noqa: F401

PRICES = "# test prices\ngpu_hour.H100 = 1\ncreate = 0\n"  # an H100 for the default hour: $1


@pytest.mark.parametrize("field, value, says", [
    ("backend", "nope", "Input should be 'local', 'podman', 'docker' or 'modal'"),
    ("colour", 1, "Extra inputs are not permitted"),
    ("memory", "lots", "memory"),
])
def test_a_bad_field_is_refused_naming_it(field, value, says):
    with pytest.raises(ValidationError) as refused:
        GpuboxSandboxConfig(**{field: value})
    assert field in str(refused.value) and says in str(refused.value)


@pytest.mark.anyio
async def test_a_create_the_agent_refuses_fails_the_sample_with_its_message(store):
    config = GpuboxSandboxConfig(config={"colour": 1}, environments={"second": GpuboxSandboxConfig()})
    with pytest.raises(SandboxError, match="colour: unknown key"):
        await GpuboxSandboxEnvironment.sample_init("bad_input", config, {})
    # The other sandbox, "second", was made and then ended, its connection closed: a Client left to the
    # garbage collector hung the next test (zmq.Context.__del__ waiting on its socket).
    assert not running()


def test_a_budget_refusal_is_the_samples_error(store, tmp_path, monkeypatch):
    # Refused before anything is dispatched: Modal is never reached (and could not be, from here).
    for name in ("MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MODAL_SERVER_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("HOME", str(tmp_path))
    prices = tmp_path / "prices.txt"
    prices.write_text(PRICES)
    run_cli("budget", "init", "lab", "--max-usd", "0.5", "--prices", str(prices))
    config = GpuboxSandboxConfig(backend="modal", gpu="H100", budget="lab", timeout=3600)
    task = Task(dataset=[Sample(input="x")], sandbox=("gpubox", config))
    [log] = inspect_eval(task, model="mockllm/model", log_dir=str(tmp_path / "logs"), display="none")
    assert log.status == "error"
    [sample] = log.samples
    assert "budget lab (ceiling $0.50) cannot hold this create's reservation of $1.00" in sample.error.message
    assert BudgetExceeded.__name__ in sample.error.traceback
    assert run_cli("ls") == []
    assert run_cli("budget")["budgets"][0]["reserved_usd"] == 0.0


@pytest.mark.anyio
async def test_cleanup_of_an_unknown_id_says_so(store):
    with pytest.raises(SandboxError, match="no sandbox with id or name 'nonexistent-id'"):
        await GpuboxSandboxEnvironment.cli_cleanup("nonexistent-id")
