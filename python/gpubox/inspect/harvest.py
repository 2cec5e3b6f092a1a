"""harvest_outputs: the current sample's finished gpubox jobs, downloaded and recorded in the
sample's store() (for a solver or a scorer to read)."""

import os
import tempfile
from typing import Optional

import anyio
from inspect_ai.util import sandbox as sample_sandbox, store

from . import process
from .environment import GpuboxSandboxEnvironment

TEXT_BYTES = 4096


async def harvest_outputs(key: str = "gpubox_jobs", sandbox: str = "default", into: Optional[str] = None,
                          text_bytes: int = TEXT_BYTES) -> dict:
    """Downloads the finished jobs of the sample's sandbox (by name) into INTO/SANDBOX_ID/JOB_ID (INTO: the
    config's harvest directory, else a new temporary one) and sets store()[key] to, and returns,
    {JOB_ID: {"status", "dir", "files": {PATH: {"size": N, "text": T}}}}, PATH relative to the job's dir
    (out/NAME, stdout.log, stderr.log), "text" only for UTF-8 files of at most text_bytes. Must run in a
    sample (a solver or scorer); a job harvested before is not downloaded again."""
    environment = sample_sandbox(sandbox).as_type(GpuboxSandboxEnvironment)
    root = os.path.join(into or environment.config.harvest or tempfile.mkdtemp(prefix="gpubox-harvest-"),
                        environment.sandbox_id)
    statuses = await anyio.to_thread.run_sync(process.harvest_jobs, environment.sandbox_id, root)
    record = {}
    for job_id, status in statuses.items():
        job_dir = os.path.join(root, job_id)
        record[job_id] = {"status": status, "dir": job_dir, "files": _files(job_dir, text_bytes)}
    store().set(key, record)
    return record


def _files(job_dir: str, text_bytes: int) -> dict:
    """{PATH: {"size", "text"?}} of every file under job_dir, sorted."""
    files = {}
    for parent, _, names in os.walk(job_dir):
        for name in names:
            path = os.path.join(parent, name)
            entry = {"size": os.path.getsize(path)}
            if entry["size"] <= text_bytes:
                with open(path, "rb") as f:
                    try:
                        entry["text"] = f.read().decode("utf-8")
                    except UnicodeDecodeError:
                        pass
            files[os.path.relpath(path, job_dir)] = entry
    return dict(sorted(files.items()))
