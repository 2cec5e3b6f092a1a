"""How a SandboxConfig becomes a sandbox: the `gpubox create` arguments and agent
config (docs/config.md), the mounts, and the commands run in the sandbox after it
starts (pip, apt-get, git). Pure logic: nothing here runs anything."""

import os
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

from . import backends
from .config import SandboxConfig, is_local_path, memory_mib

LIBRARY_DIR = "/workspace/libraries"     # kernel.workspace_dir: Workspace libraries go here
MODELS_DIR = "/gpubox/models"            # model files, mounted read-only under neutral names
HOSTED_DIR = "/gpubox/hosted"            # the model host's model and SAE directories, mounted alike
REPOS_DIR = "/gpubox/repos"              # local repositories, mounted read-only to clone from
UPLOAD_DIR = "/workspace/.gpubox/packages"  # local python_packages, copied in before pip runs


@dataclass
class ModelHandle:
    """A model of the sandbox: where its files are inside (path) and which variable holds it."""

    name: str
    var_name: str
    tokenizer_var: str
    path: str                    # in the sandbox
    local_path: str              # on this machine
    hidden: bool
    is_peft: bool
    base_model: Optional[str]    # in the sandbox (a mounted path) or a model id


@dataclass
class CreatePlan:
    """What Sandbox.start runs: `gpubox --json create` + create_args, with agent_config as --config."""

    create_args: List[str]
    agent_config: dict
    handles: List[ModelHandle] = field(default_factory=list)


def _target(index: int, local: str, suffix: str = "") -> str:
    ext = os.path.splitext(local)[1] if os.path.isfile(local) else ""
    return "%s/m%d%s%s" % (MODELS_DIR, index, suffix, ext)


def _gpu_flag(config: SandboxConfig) -> List[str]:
    if not config.gpu:
        return []
    return ["--gpu", backends.backend(config.backend).gpu_flag(config.gpu, config.gpu_count)]


def plan_create(config: SandboxConfig, name: Optional[str] = None) -> CreatePlan:
    """The create arguments and agent config for config; ValueError for what this machine lacks."""
    config.check_local()
    args = ["--backend", config.backend]
    if name:
        args += ["--name", name]
    if config.image:
        args += ["--image", config.image]
    if config.cpu is not None:
        args += ["--cpu", repr(float(config.cpu))]
    if config.memory is not None:
        args += ["--memory", str(memory_mib("SandboxConfig.memory", config.memory))]
    if config.timeout:
        args += ["--timeout", repr(float(config.timeout))]
    if config.idle_timeout:
        args += ["--idle-timeout", repr(float(config.idle_timeout))]
    traits = backends.backend(config.backend)
    if traits.open_network:
        args += ["--network", traits.open_network if config.network else "none"]
    if config.modal_app:
        args += ["--app", config.modal_app]
    for key, value in sorted((config.kubernetes or {}).items()):
        args += ["--" + key.replace("_", "-"), value]
    if config.budget:
        args += ["--budget", config.budget]
    args += _gpu_flag(config)
    for secret in config.secrets:  # the CLI reads the value from its environment, which is ours
        args += ["--secret", secret]
    for target, source in sorted(config.volumes.items()):
        if traits.volumes_by_name:  # a Modal Volume, or a PersistentVolumeClaim, by name
            args += ["--volume", "%s:%s" % (source, target)]
            continue
        read_only = source.endswith(":ro")
        local = os.path.realpath(source[:-3] if read_only else source)
        args += ["--mount", "%s:%s%s" % (local, target, ":ro" if read_only else "")]

    handles, entries = [], []
    device = "cuda" if config.gpu else "cpu"
    for index, model in enumerate(config.models):
        local = model.local_path()
        target = _target(index, local)
        args += ["--mount", "%s:%s:ro" % (local, target)]
        base = model.base_model
        local_base = model.local_base_model()
        if local_base:
            base = _target(index, local_base, "-base")
            args += ["--mount", "%s:%s:ro" % (local_base, base)]
        entry = {"name": model.name, "path": target, "loader": model.loader, "var_name": model.var_name,
                 "tokenizer_var": model.tokenizer_var, "device": model.device or device, "dtype": model.dtype,
                 "hidden": model.hidden, "is_peft": model.is_peft}
        if model.is_peft:
            entry["base_model"] = base
        entries.append(entry)
        handles.append(ModelHandle(model.name, model.var_name, model.tokenizer_var, target, local, model.hidden,
                                   model.is_peft, base))
    if config.model_host is not None:
        hosted, mounts = hosted_models(config)
        args += mounts
    for index, repo in enumerate(config.repos):
        if repo.is_local:
            args += ["--mount", "%s:%s/r%d:ro" % (os.path.realpath(os.path.expanduser(repo.url)), REPOS_DIR, index)]

    agent_config = {"kernel": {"python": config.python, "workspace_dir": LIBRARY_DIR, "preload": True,
                               "models": entries}}
    if config.model_host is not None:
        agent_config["model_host"] = {"models": hosted}
    if config.env:
        agent_config["env"] = dict(config.env)
    return CreatePlan(args, agent_config, handles)


def hosted_models(config: SandboxConfig) -> Tuple[List[dict], List[str]]:
    """model_host.models entries (docs/config.md) and the --mount arguments of their directories:
    each mounted read-only at a neutral path; on a backend whose volumes are its own (Modal), the
    paths are the sandbox's, in those volumes, and nothing is mounted."""
    by_name = backends.backend(config.backend).volumes_by_name
    entries, mounts = [], []
    for index, model in enumerate(config.model_host):
        paths = [model.path] + [sae["path"] for sae in model.saes]
        if not by_name:
            targets = ["%s/h%d" % (HOSTED_DIR, index)] + [
                "%s/h%d-sae%d" % (HOSTED_DIR, index, i) for i in range(len(model.saes))]
            for (_, local), target in zip(model.local_paths(), targets):
                mounts += ["--mount", "%s:%s:ro" % (local, target)]
            paths = targets
        entry = {"name": model.name, "path": paths[0], "device": model.device or ("cuda" if config.gpu else "cpu"),
                 "hidden": model.hidden, "cuda_graphs": model.cuda_graphs}
        if entry["device"] == "cpu" and (model.tensor_parallel or 1) > 1 and not model.allow_cpu_split:
            raise ValueError("HostedModel(%r).tensor_parallel: %d ranks on the CPU (the sandbox has no GPU, or device='cpu') "
                             "is a CPU split, for tests and small machines: it needs allow_cpu_split=True"
                             % (model.name, model.tensor_parallel))
        for key in ("dtype", "max_batch", "max_queue", "kv_cache_mb", "tensor_parallel"):
            if getattr(model, key) is not None:
                entry[key] = getattr(model, key)
        if model.allow_cpu_split:
            entry["allow_cpu_split"] = True
        if model.saes:
            entry["saes"] = [dict(sae, path=path) for sae, path in zip(model.saes, paths[1:])]
        entries.append(entry)
    return entries, mounts


PIP_ENV = {"PIP_BREAK_SYSTEM_PACKAGES": "1", "PIP_ROOT_USER_ACTION": "ignore",
           "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}


def pip_command(config: SandboxConfig, specs: List[str], editable: bool = False) -> List[str]:
    """pip install in the sandbox's Python; without network, offline (--no-index, no build isolation)."""
    argv = [config.python, "-m", "pip", "install", "--quiet"]
    if not config.network:
        argv += ["--no-index", "--no-build-isolation"]
    for spec in specs:
        argv += ["-e", spec] if editable else [spec]
    return argv


def package_uploads(config: SandboxConfig) -> Tuple[List[Tuple[str, str]], List[str]]:
    """(local path, sandbox path) copies for local python_packages, and the pip specs after the copies."""
    uploads, specs = [], []
    for index, spec in enumerate(config.python_packages):
        if is_local_path(spec):
            local = os.path.realpath(os.path.expanduser(spec))
            remote = "%s/%d/%s" % (UPLOAD_DIR, index, os.path.basename(local))
            uploads.append((local, remote))
            specs.append(remote)
        else:
            specs.append(spec)
    return uploads, specs


def apt_command(packages: List[str]) -> List[str]:
    return ["sh", "-c", 'apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q '
            '--no-install-recommends "$@"', "apt-get", *packages]


def clone_command(config: SandboxConfig, index: int) -> List[str]:
    repo = config.repos[index]
    source = "%s/r%d" % (REPOS_DIR, index) if repo.is_local else repo.clone_url
    argv = ["git", "-c", "safe.directory=*", "clone", "--quiet"]
    if repo.branch:
        argv += ["--branch", repo.branch]
    return argv + ["--", source, repo.sandbox_dest]
