"""Inspect's own sandbox conformance checks (inspect_ai.util._sandbox.self_check,
the ones its docker, local, k8s and Modal providers run) against the gpubox
provider, on each backend conftest.py's GPUBOX_INSPECT_BACKENDS names."""

from inspect_ai.util._sandbox.self_check import *  # noqa: F401,F403

import pytest  # noqa: E402

pytestmark = pytest.mark.anyio
