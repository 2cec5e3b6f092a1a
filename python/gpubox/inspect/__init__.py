"""gpubox as an Inspect sandbox provider (`pip install gpubox[inspect]`; docs/inspect.md).

    @task
    def my_task():
        return Task(dataset=..., solver=react(tools=[bash(), python()]),
                    sandbox=("gpubox", GpuboxSandboxConfig(backend="local", config={"model_host": {...}})))

or `inspect eval TASK --sandbox gpubox`. Inspect finds the provider through the
`inspect_ai` entry point (gpubox.inspect._registry); importing this package
registers it too.
"""

from .config import GpuboxSandboxConfig
from .environment import GpuboxSandboxEnvironment
from .harvest import harvest_outputs

__all__ = ["GpuboxSandboxConfig", "GpuboxSandboxEnvironment", "harvest_outputs"]
