"""The module Inspect's `inspect_ai` entry point names: importing it registers `gpubox`."""

from .environment import GpuboxSandboxEnvironment  # noqa: F401
