"""GpuboxSandboxConfig: what `sandbox=("gpubox", CONFIG)` may say, and the
`gpubox create` arguments it becomes. Unknown keys and bad values are refused
by pydantic, naming the field."""

import json
import os
from typing import Dict, List, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..config import memory_mib


class GpuboxSandboxConfig(BaseModel):
    """One sample's sandbox: the backend, its resources, and the agent config (the model host's
    models among it). Frozen, as Inspect's configs are."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    backend: Literal["local", "podman", "docker", "modal"] = "local"
    image: Optional[str] = None
    """podman/docker: an image built from image/Dockerfile; modal: any registry image."""
    gpu: Optional[str] = None
    """The CLI's --gpu: local "all" or "0,1"; podman/docker "all" or a count; modal "H100" or "H100:2"."""
    cpu: Optional[float] = Field(default=None, gt=0, le=1024)
    memory: Optional[Union[int, str]] = None
    """MiB, or a size such as "16GiB"."""
    timeout: Optional[float] = Field(default=3600, ge=0, le=604800)
    """Seconds from create until the sandbox ends, whatever the sample is doing (0 or None: none)."""
    network: Literal["none", "open"] = "none"
    """none: loopback only. open: the backend's outbound network (local: the host's)."""
    allowed_hosts: List[str] = []
    """modal: the only CIDRs the sandbox may reach (network allow:...)."""
    env: Dict[str, str] = {}
    secrets: List[str] = []
    """Names of variables of this process's environment, passed in by value (never in argv)."""
    mounts: Dict[str, str] = {}
    """Sandbox path -> "LOCAL_DIR[:ro]"; modal: -> a Volume's name."""
    config: Optional[Union[dict, str]] = None
    """The agent config (docs/config.md), or the path of a file holding it: the model host's models
    (model_host), the kernel, supervised children. Checked by the agent, strictly."""
    budget: Optional[str] = None
    """The budget that holds each sandbox's cost (docs/budget.md); past its ceiling sample_init fails."""
    environments: Dict[str, "GpuboxSandboxConfig"] = {}
    """More named sandboxes for each sample, each with its own config; this one is "default"."""
    harvest: Optional[str] = None
    """A local directory: at sample_cleanup every job's outputs are downloaded into
    HARVEST/SANDBOX_ID/JOB_ID before the sandbox ends."""

    def __hash__(self) -> int:
        # Inspect keys its sandbox cache by the config: pydantic's frozen hash fails on the dict and list fields.
        return hash(self.model_dump_json())

    @field_validator("memory")
    @classmethod
    def _memory(cls, value):
        if value is not None:
            memory_mib("memory", value)  # ValueError naming the field and what was expected
        return value

    @field_validator("env")
    @classmethod
    def _env(cls, value):
        for name in value:
            if not name or "=" in name or "\0" in name:
                raise ValueError("%r is not a variable name" % name)
        return value

    @field_validator("config")
    @classmethod
    def _agent_config(cls, value):
        if isinstance(value, str) and not os.path.isfile(value):
            raise ValueError("the agent config file %r does not exist" % value)
        return value

    @model_validator(mode="after")
    def _backend_fits(self):
        if self.allowed_hosts and self.backend != "modal":
            raise ValueError("allowed_hosts: only the modal backend limits the network by address (got backend %r)"
                             % self.backend)
        if self.allowed_hosts and self.network != "none":
            raise ValueError("allowed_hosts: give either network='open' or allowed_hosts, not both")
        for name, other in self.environments.items():
            if name == "default" or not name:
                raise ValueError("environments: %r cannot name another sandbox (this config is \"default\")" % name)
            if other.environments:
                raise ValueError("environments[%r].environments: only the default config names more sandboxes" % name)
        if self.image and self.backend == "local":
            raise ValueError("image: the local backend runs the host's own root, read-only (no image)")
        return self

    @classmethod
    def of(cls, config) -> "GpuboxSandboxConfig":
        """Inspect's config as given: None, this model, a dict, or a string naming an agent config file."""
        if config is None:
            return cls()
        if isinstance(config, cls):
            return config
        if isinstance(config, str):
            return cls(config=config)
        if isinstance(config, dict):
            return cls(**config)
        if isinstance(config, BaseModel):
            return cls(**config.model_dump())
        raise TypeError("the gpubox sandbox's config: expected a GpuboxSandboxConfig, a dict or the path of an "
                        "agent config file, got %s" % type(config).__name__)

    def agent_config(self) -> Optional[dict]:
        """The agent config as a dict (a file's read here), or None."""
        if isinstance(self.config, str):
            with open(self.config) as f:
                return json.load(f)
        return self.config

    def create_args(self) -> List[str]:
        """`gpubox create`'s flags for this config (the agent config goes on stdin)."""
        args = ["--backend", self.backend]
        if self.image:
            args += ["--image", self.image]
        if self.cpu is not None:
            args += ["--cpu", repr(float(self.cpu))]
        if self.memory is not None:
            args += ["--memory", str(memory_mib("memory", self.memory))]
        if self.timeout:
            args += ["--timeout", repr(float(self.timeout))]
        args += ["--network", self._network_flag()]
        if self.gpu:
            args += ["--gpu", self.gpu]
        if self.budget:
            args += ["--budget", self.budget]
        for name, value in sorted(self.env.items()):
            args += ["--env", "%s=%s" % (name, value)]
        for name in self.secrets:
            args += ["--secret", name]
        for target, source in sorted(self.mounts.items()):
            if self.backend == "modal":
                args += ["--volume", "%s:%s" % (source, target)]
            else:
                read_only = source.endswith(":ro")
                local = os.path.realpath(source[:-3] if read_only else source)
                args += ["--mount", "%s:%s%s" % (local, target, ":ro" if read_only else "")]
        return args

    def _network_flag(self) -> str:
        if self.allowed_hosts:
            return "allow:" + ",".join(self.allowed_hosts)
        if self.network == "none":
            return "none"
        return {"local": "host", "podman": "bridge", "docker": "bridge", "modal": "open"}[self.backend]
