"""What a sandbox is made of: SandboxConfig, ModelConfig, HostedModel and RepoConfig
(Seer's names and fields, plus a few of gpubox's own). Every field is checked
when the object is made; a bad value raises ValueError naming the field, so
nothing starts. check_local() adds the checks that read this machine (secrets
set, local paths present) and runs again at Sandbox.start."""

import os
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple, Union

from . import backends

BACKENDS = tuple(backends.BACKENDS)
LOADERS = ("transformers", "torchscript", "safetensors")
DTYPES = ("", "float32", "float16", "bfloat16", "float64")
HOSTED_DTYPES = ("float32", "bfloat16", "float16")   # what gpubox-modeld casts weights to
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_APT_NAME = re.compile(r"[a-z0-9][a-z0-9+.\-]*(:[a-z0-9]+)?(=[A-Za-z0-9.+~:\-]+)?\Z")
_GITHUB_SHORT = re.compile(r"[\w.\-]+/[\w.\-]+\Z")
_MODAL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")   # apps and Volumes, as the CLI checks them
_MODAL_GPU = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*\Z")          # H100, A100-80GB, any (the count is gpu_count)
MODAL_MAX_TIMEOUT = 86400   # Modal's container timeout is 1 s to 24 h
MODAL_MAX_GPUS = 8
# SandboxConfig.kubernetes: create's --FLAGs. Not --warm-pool: a pool's agents run with its own config,
# and a Sandbox always sends one (docs/kubernetes.md).
KUBERNETES_OPTIONS = ("namespace", "context", "queue")
_KUBERNETES_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?\Z")   # a PersistentVolumeClaim's name
_MEMORY = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B?)\s*\Z", re.IGNORECASE)


def _fail(where: str, message: str):
    raise ValueError("%s: %s" % (where, message))


def _number(where, value, low, high, integer=False):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
        _fail(where, "expected %s from %s to %s, got %r" % ("an integer" if integer else "a number", low, high, value))
    if not low <= value <= high:
        _fail(where, "expected %s to %s, got %r" % (low, high, value))
    return value


def _strings(where, value):
    if isinstance(value, str) or not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v for v in value):
        _fail(where, "expected a list of non-empty strings, got %r" % (value,))
    return list(value)


def _pairs(where, value):
    if not isinstance(value, (list, tuple)):
        _fail(where, "expected a list of (local_path, sandbox_path) pairs, got %r" % (value,))
    for i, pair in enumerate(value):
        if (not isinstance(pair, (list, tuple)) or len(pair) != 2 or not all(isinstance(p, str) and p for p in pair)):
            _fail("%s[%d]" % (where, i), "expected (local_path, sandbox_path), got %r" % (pair,))
        if not pair[1].startswith("/"):
            _fail("%s[%d]" % (where, i), "the sandbox path must be absolute, got %r" % pair[1])
    return [tuple(p) for p in value]


def is_local_path(text: str) -> bool:
    """A package or repo given as a path on this machine rather than a name or URL."""
    return text.startswith(("/", "./", "../", "~")) or os.path.exists(text)


def memory_mib(where: str, value: Union[int, str]) -> int:
    """Whole MiB from an int (MiB) or a text with a unit ("512MiB", "16GiB", "2G")."""
    if isinstance(value, str):
        match = _MEMORY.match(value)
        if not match:
            _fail(where, "expected MiB as an integer or a size like '16GiB', got %r" % value)
        scale = {"": 1, "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}[match.group(2).upper()]
        value = float(match.group(1)) * scale
        if value != int(value):
            _fail(where, "expected whole MiB, got %r" % value)
        value = int(value)
    return _number(where, value, 4, 1 << 24, integer=True)


def hf_cache_path(name: str) -> Optional[str]:
    """The local snapshot directory of Hugging Face model `name` in the hub cache, if it is there."""
    hub = os.environ.get("HF_HUB_CACHE") or os.path.join(
        os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface"), "hub")
    root = os.path.join(hub, "models--" + name.replace("/", "--"))
    try:
        with open(os.path.join(root, "refs", "main")) as f:
            snapshot = os.path.join(root, "snapshots", f.read().strip())
    except OSError:
        return None
    return snapshot if os.path.isdir(snapshot) else None


@dataclass
class ModelConfig:
    """A model preloaded into the sandbox's kernel (docs/config.md kernel.models): its
    files on this machine are mounted read-only into the sandbox at a neutral path."""

    name: str
    var_name: str = "model"
    hidden: bool = False
    is_peft: bool = False
    base_model: Optional[str] = None   # with is_peft: a local directory (mounted) or a model id
    path: Optional[str] = None         # local file or directory; None: `name` in the local Hugging Face cache
    tokenizer_var: Optional[str] = None  # None: "tokenizer" (or VAR_tokenizer) for transformers; "" for none
    loader: str = "transformers"
    device: Optional[str] = None       # None: "cuda" when the sandbox has a GPU, else "cpu"
    dtype: str = ""

    def __post_init__(self):
        where = "ModelConfig(%r)" % (self.name,)
        if not isinstance(self.name, str) or not 1 <= len(self.name) <= 256:
            _fail("ModelConfig.name", "expected 1 to 256 characters, got %r" % (self.name,))
        if not isinstance(self.var_name, str) or not _IDENTIFIER.match(self.var_name) or self.var_name == "model_info":
            _fail(where + ".var_name", "expected a Python identifier other than model_info, got %r" % (self.var_name,))
        for flag in ("hidden", "is_peft"):
            if not isinstance(getattr(self, flag), bool):
                _fail("%s.%s" % (where, flag), "expected True or False, got %r" % (getattr(self, flag),))
        if self.loader not in LOADERS:
            _fail(where + ".loader", "expected one of %s, got %r" % (", ".join(LOADERS), self.loader))
        if self.is_peft and (self.loader != "transformers" or not isinstance(self.base_model, str) or not self.base_model):
            _fail(where + ".base_model", "is_peft needs base_model (a local directory or a model id) "
                  "and the transformers loader")
        if not self.is_peft and self.base_model is not None:
            _fail(where + ".base_model", "only with is_peft=True")
        if self.path is not None and (not isinstance(self.path, str) or not self.path):
            _fail(where + ".path", "expected a local file or directory, got %r" % (self.path,))
        if self.tokenizer_var is None:
            self.tokenizer_var = ("tokenizer" if self.var_name == "model" else self.var_name + "_tokenizer") \
                if self.loader == "transformers" else ""
        if not isinstance(self.tokenizer_var, str) or (self.tokenizer_var and not _IDENTIFIER.match(self.tokenizer_var)):
            _fail(where + ".tokenizer_var", "expected a Python identifier or '', got %r" % (self.tokenizer_var,))
        if self.tokenizer_var and self.loader != "transformers":
            _fail(where + ".tokenizer_var", "only with the transformers loader")
        if self.device is not None and not re.match(r"(cpu|cuda(:\d+)?)\Z", str(self.device)):
            _fail(where + ".device", "expected 'cpu', 'cuda' or 'cuda:N', got %r" % (self.device,))
        if self.dtype not in DTYPES:
            _fail(where + ".dtype", "expected one of %s, got %r" % (", ".join(d or "''" for d in DTYPES), self.dtype))

    def local_path(self) -> str:
        """The model's files on this machine; ValueError when they are not there."""
        where = "ModelConfig(%r).path" % self.name
        path = os.path.expanduser(self.path) if self.path else hf_cache_path(self.name)
        if path is None:
            _fail(where, "not given, and %r is not in the local Hugging Face cache (gpubox downloads nothing: "
                  "give the model's local directory)" % self.name)
        if not os.path.exists(path):
            _fail(where, "%s does not exist" % path)
        return os.path.realpath(path)

    def local_base_model(self) -> Optional[str]:
        """base_model's files on this machine when it is a path (or is cached), else None (a model id)."""
        if not self.base_model:
            return None
        if is_local_path(self.base_model):
            path = os.path.expanduser(self.base_model)
            if not os.path.exists(path):
                _fail("ModelConfig(%r).base_model" % self.name, "%s does not exist" % path)
            return os.path.realpath(path)
        return hf_cache_path(self.base_model)


@dataclass
class HostedModel:
    """A model served by the sandbox's native model host, gpubox-modeld (docs/config.md
    model_host.models): sandbox.model(NAME) here and gpubox.Client().model(NAME) in a cell
    reach one copy of its weights. path: its Hugging Face directory on this machine, mounted
    read-only at a neutral path; with backend "modal", a path in one of the config's volumes.
    saes: [{"name", "path", "hook"?}] SAELens directories, loaded with it (mounted alike)."""

    name: str
    path: str
    dtype: Optional[str] = None        # None: float32 on cpu, bfloat16 on cuda
    device: Optional[str] = None       # None: "cuda" when the sandbox has a GPU, else "cpu"; "cuda:0,1": split across those
    saes: List[dict] = field(default_factory=list)
    hidden: bool = False
    cuda_graphs: bool = False
    max_batch: Optional[int] = None
    max_queue: Optional[int] = None
    kv_cache_mb: Optional[int] = None  # None: sized automatically
    tensor_parallel: Optional[int] = None  # ranks (1-64) the model is split into; None: the device list's length, else 1
    allow_cpu_split: bool = False      # tensor_parallel > 1 on the CPU (tests, small machines)

    def __post_init__(self):
        if not isinstance(self.name, str) or not 1 <= len(self.name) <= 256:
            _fail("HostedModel.name", "expected 1 to 256 characters, got %r" % (self.name,))
        where = "HostedModel(%r)" % (self.name,)
        if not isinstance(self.path, str) or not self.path:
            _fail(where + ".path", "expected the model's directory, got %r" % (self.path,))
        if self.dtype is not None and self.dtype not in HOSTED_DTYPES:
            _fail(where + ".dtype", "expected one of %s or None, got %r" % (", ".join(HOSTED_DTYPES), self.dtype))
        if self.device is not None and not re.match(r"(cpu|cuda(:\d{1,3}(,\d{1,3}){0,63})?)\Z", str(self.device)):
            _fail(where + ".device", "expected 'cpu', 'cuda', 'cuda:N' or a list of GPUs 'cuda:N,M,...', got %r" % (self.device,))
        gpus = [int(n) for n in self.device[5:].split(",")] if self.device and self.device.startswith("cuda:") else []
        if len(set(gpus)) != len(gpus):
            _fail(where + ".device", "expected each GPU listed once, got %r" % (self.device,))
        for flag in ("hidden", "cuda_graphs", "allow_cpu_split"):
            if not isinstance(getattr(self, flag), bool):
                _fail("%s.%s" % (where, flag), "expected True or False, got %r" % (getattr(self, flag),))
        if self.tensor_parallel is not None:
            _number(where + ".tensor_parallel", self.tensor_parallel, 1, 64, integer=True)
            if len(gpus) > 1 and self.tensor_parallel != len(gpus):
                _fail(where + ".tensor_parallel", "%d does not match device %r, which lists %d GPUs"
                      % (self.tensor_parallel, self.device, len(gpus)))
        for key, low, high in (("max_batch", 1, 4096), ("max_queue", 0, 100000), ("kv_cache_mb", 1, 1048576)):
            if getattr(self, key) is not None:
                _number("%s.%s" % (where, key), getattr(self, key), low, high, integer=True)
        if not isinstance(self.saes, (list, tuple)):
            _fail(where + ".saes", "expected a list of {'name', 'path', 'hook'?}, got %r" % (self.saes,))
        for i, sae in enumerate(self.saes):
            at = "%s.saes[%d]" % (where, i)
            if not isinstance(sae, dict) or set(sae) - {"name", "path", "hook"} or not {"name", "path"} <= set(sae):
                _fail(at, "expected {'name', 'path', 'hook'?}, got %r" % (sae,))
            for key in sae:
                if not isinstance(sae[key], str) or not sae[key]:
                    _fail("%s.%s" % (at, key), "expected a non-empty string, got %r" % (sae[key],))
        if len({s["name"] for s in self.saes}) != len(self.saes):
            _fail(where + ".saes", "two SAEs have the same name")

    def local_paths(self) -> List[Tuple[str, str]]:
        """(where, real path) of the model's and its SAEs' directories here; ValueError naming one that is missing."""
        where = "HostedModel(%r)" % self.name
        found = []
        for at, path in [(where + ".path", self.path)] + [
                ("%s.saes[%d].path" % (where, i), s["path"]) for i, s in enumerate(self.saes)]:
            local = os.path.expanduser(path)
            if not os.path.isdir(local):
                _fail(at, "%s is not a directory on this machine" % path)
            found.append((at, os.path.realpath(local)))
        return found


@dataclass
class RepoConfig:
    """A git repository cloned into the sandbox (to dest, default /workspace/NAME); with
    install, `pip install -e` of the clone. url: "owner/repo" (GitHub), a URL, or a
    local repository (mounted read-only and cloned from there)."""

    url: str
    install: bool = False
    dest: Optional[str] = None
    branch: Optional[str] = None

    def __post_init__(self):
        if not isinstance(self.url, str) or not self.url.strip():
            _fail("RepoConfig.url", "expected a repository URL, owner/repo or a local path, got %r" % (self.url,))
        where = "RepoConfig(%r)" % self.url
        if not isinstance(self.install, bool):
            _fail(where + ".install", "expected True or False, got %r" % (self.install,))
        if self.dest is not None and (not isinstance(self.dest, str) or not self.dest.startswith("/")):
            _fail(where + ".dest", "expected an absolute sandbox path, got %r" % (self.dest,))
        if self.branch is not None and (not isinstance(self.branch, str) or not self.branch or self.branch.startswith("-")):
            _fail(where + ".branch", "expected a branch or tag name, got %r" % (self.branch,))

    @property
    def is_local(self) -> bool:
        return is_local_path(self.url)

    @property
    def clone_url(self) -> str:
        if _GITHUB_SHORT.match(self.url) and not self.is_local:
            return "https://github.com/%s.git" % self.url
        return self.url

    @property
    def repo_name(self) -> str:
        base = self.url.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1]
        return base[:-4] if base.endswith(".git") else base

    @property
    def sandbox_dest(self) -> str:
        return self.dest or "/workspace/" + self.repo_name


@dataclass
class SandboxConfig:
    """A sandbox's resources, models, packages and files (Seer's SandboxConfig; gpubox's
    additions: cpu, memory, idle_timeout, backend, image, volumes, python, network, modal_app, budget,
    model_host). models are the kernel's (transformers in the notebook); model_host's are served by
    gpubox-modeld (sandbox.model(NAME)).
    With backend "modal", volumes name Modal Volumes ({"/weights": "NAME"}) and image is a
    registry image (docs/modal.md)."""

    gpu: Optional[str] = None          # None: no GPU; a type name ("A100", "any"): one local GPU per gpu_count
    gpu_count: int = 1
    cpu: Optional[float] = None        # CPUs (cgroup quota)
    memory: Optional[Union[int, str]] = None  # MiB, or "16GiB"
    timeout: Optional[float] = 3600    # seconds from start until the sandbox ends (None or 0: none)
    idle_timeout: Optional[float] = None
    env: Dict[str, str] = field(default_factory=dict)
    secrets: List[str] = field(default_factory=list)   # names of variables of this environment
    models: List[ModelConfig] = field(default_factory=list)
    model_host: Optional[List[HostedModel]] = None   # None: no model host; []: one with no models yet
    python_packages: List[str] = field(default_factory=list)   # pip requirement specs or local paths
    system_packages: List[str] = field(default_factory=list)   # apt package names
    repos: List[RepoConfig] = field(default_factory=list)
    local_files: List[Tuple[str, str]] = field(default_factory=list)   # (local_path, sandbox_path)
    local_dirs: List[Tuple[str, str]] = field(default_factory=list)
    backend: str = "local"
    image: Optional[str] = None        # podman/docker: an image built from image/Dockerfile; modal: any registry image
    volumes: Dict[str, str] = field(default_factory=dict)  # sandbox path -> "LOCAL_DIR[:ro]"; modal: a Volume's name
    python: str = "python3"            # the sandbox's Python for the kernel, pip and exec_python
    network: bool = False              # outbound network, asked for by name; packages by name and remote repos need it
    execution_mode: Optional[object] = None  # Seer's; accepted and unused (every gpubox sandbox has all modes)
    modal_app: Optional[str] = None    # modal: the Modal app the sandbox belongs to (None: "gpubox")
    kubernetes: Optional[Dict[str, str]] = None  # kubernetes: namespace, context, queue (docs/kubernetes.md)
    budget: Optional[str] = None       # the budget that holds its cost first (None: the default one, if set;
                                       # "none": no budget); past its ceiling start() raises BudgetExceeded

    def __post_init__(self):
        S = "SandboxConfig."
        if self.backend not in BACKENDS:
            _fail(S + "backend", "expected one of %s, got %r" % (", ".join(BACKENDS), self.backend))
        if self.gpu is not None and (not isinstance(self.gpu, str) or not self.gpu):
            _fail(S + "gpu", "expected a GPU type such as 'A100' or 'any', or None, got %r" % (self.gpu,))
        _number(S + "gpu_count", self.gpu_count, 1, 64, integer=True)
        if self.cpu is not None:
            _number(S + "cpu", self.cpu, 0.01, 1024)
        if self.memory is not None:
            memory_mib(S + "memory", self.memory)
        for name in ("timeout", "idle_timeout"):
            if getattr(self, name) is not None:
                _number(S + name, getattr(self, name), 0, 604800)
        if not isinstance(self.env, dict):
            _fail(S + "env", "expected a dict of str to str, got %r" % (self.env,))
        for key, value in self.env.items():
            if not isinstance(key, str) or not _ENV_NAME.match(key):
                _fail(S + "env", "%r is not a variable name" % (key,))
            if not isinstance(value, str):
                _fail("%senv[%r]" % (S, key), "expected a string, got %r" % (value,))
        for name in _strings(S + "secrets", self.secrets):
            if not _ENV_NAME.match(name):
                _fail(S + "secrets", "%r is not a variable name" % name)
        if not isinstance(self.models, (list, tuple)) or not all(isinstance(m, ModelConfig) for m in self.models):
            _fail(S + "models", "expected a list of ModelConfig, got %r" % (self.models,))
        seen = set()
        for model in self.models:
            for var in filter(None, (model.var_name, model.tokenizer_var)):
                if var in seen:
                    _fail(S + "models", "the variable %r is bound by two models" % var)
                seen.add(var)
        if len({m.name for m in self.models}) != len(self.models):
            _fail(S + "models", "two models have the same name")
        if self.model_host is not None:
            if not isinstance(self.model_host, (list, tuple)) or not all(isinstance(m, HostedModel) for m in self.model_host):
                _fail(S + "model_host", "expected a list of HostedModel, got %r" % (self.model_host,))
            if len({m.name for m in self.model_host}) != len(self.model_host):
                _fail(S + "model_host", "two hosted models have the same name")
        _strings(S + "python_packages", self.python_packages)
        for name in _strings(S + "system_packages", self.system_packages):
            if not _APT_NAME.match(name):
                _fail(S + "system_packages", "%r is not an apt package name" % name)
        if not isinstance(self.repos, (list, tuple)) or not all(isinstance(r, RepoConfig) for r in self.repos):
            _fail(S + "repos", "expected a list of RepoConfig, got %r" % (self.repos,))
        self.local_files = _pairs(S + "local_files", self.local_files)
        self.local_dirs = _pairs(S + "local_dirs", self.local_dirs)
        traits = backends.backend(self.backend)
        if self.image is not None and not traits.takes_image:
            _fail(S + "image", "only with backend 'podman' or 'docker' (a local sandbox is an overlay of this host)")
        if not isinstance(self.volumes, dict):
            _fail(S + "volumes", "expected a dict of sandbox path to 'LOCAL_DIR[:ro]', got %r" % (self.volumes,))
        for target, source in self.volumes.items():
            if not isinstance(target, str) or not target.startswith("/") or target == "/":
                _fail(S + "volumes", "the sandbox path %r must be absolute and not /" % (target,))
            if not isinstance(source, str) or not source or source == ":ro":
                _fail("%svolumes[%r]" % (S, target), "expected 'LOCAL_DIR' or 'LOCAL_DIR:ro', got %r" % (source,))
        if not isinstance(self.python, str) or not self.python:
            _fail(S + "python", "expected a program name or path, got %r" % (self.python,))
        if not isinstance(self.network, bool):
            _fail(S + "network", "expected True or False, got %r" % (self.network,))
        if not self.network and self.needs_network():
            _fail(S + "network", "%s need the network, which a sandbox has only when asked: pass network=True"
                  % ", ".join(self.needs_network()))
        traits.checks(self)
        if not traits.takes_app and self.modal_app is not None:
            _fail(S + "modal_app", "only with backend 'modal'")
        if self.kubernetes is not None and self.backend != "kubernetes":
            _fail(S + "kubernetes", "only with backend 'kubernetes'")
        if self.budget is not None and (not isinstance(self.budget, str) or not _MODAL_NAME.match(self.budget)):
            _fail(S + "budget", "expected a budget's name (gpubox budget lists them) or 'none', got %r" % (self.budget,))

    def _check_modal(self):
        """What Modal (or gpubox on Modal) refuses, named by field."""
        S = "SandboxConfig."
        if self.gpu is not None and not _MODAL_GPU.match(self.gpu):
            _fail(S + "gpu", "expected a Modal GPU type such as 'H100', 'A100-80GB' or 'any' (the count is "
                  "gpu_count), got %r" % (self.gpu,))
        if self.gpu is not None and self.gpu_count > MODAL_MAX_GPUS:
            _fail(S + "gpu_count", "Modal gives a sandbox 1 to %d GPUs, got %r" % (MODAL_MAX_GPUS, self.gpu_count))
        if not self.timeout or not 1 <= self.timeout <= MODAL_MAX_TIMEOUT:
            _fail(S + "timeout", "a Modal sandbox always has a timeout, 1 to %d seconds, got %r"
                  % (MODAL_MAX_TIMEOUT, self.timeout))
        if self.idle_timeout is not None and self.idle_timeout > MODAL_MAX_TIMEOUT:
            _fail(S + "idle_timeout", "at most the longest Modal timeout, %d seconds, got %r"
                  % (MODAL_MAX_TIMEOUT, self.idle_timeout))
        if self.models:
            _fail(S + "models", "backend 'modal' cannot mount this machine's model files; copy them in with "
                  "Sandbox.upload, or keep them in a Modal Volume (volumes={'/weights': 'NAME'})")
        for repo in self.repos:
            if repo.is_local:
                _fail("RepoConfig(%r).url" % repo.url, "a local repository cannot be mounted into a Modal sandbox; "
                      "give its URL")
        for model in self.model_host or ():
            for at, path in [("HostedModel(%r).path" % model.name, model.path)] + [
                    ("HostedModel(%r).saes[%d].path" % (model.name, i), s["path"]) for i, s in enumerate(model.saes)]:
                if not any(path.startswith(target.rstrip("/") + "/") for target in self.volumes):
                    _fail(at, "with backend 'modal', a path in one of volumes (%s), where `gpubox model ID pull` "
                          "puts weights; this machine's files cannot be mounted into Modal, got %r"
                          % (", ".join(sorted(self.volumes)) or "none given", path))
        for target, name in self.volumes.items():
            if not _MODAL_NAME.match(name) or target.startswith("/run/gpubox"):
                _fail("%svolumes[%r]" % (S, target), "with backend 'modal', the name of a Modal Volume (1-64 of "
                      "A-Z a-z 0-9 . _ -; created when missing) mounted read-write, got %r" % (name,))
        if self.modal_app is not None and (not isinstance(self.modal_app, str) or not _MODAL_NAME.match(self.modal_app)):
            _fail(S + "modal_app", "expected a Modal app name (1-64 of A-Z a-z 0-9 . _ -), got %r" % (self.modal_app,))

    def _check_kubernetes(self):
        """What gpubox on Kubernetes refuses, named by field."""
        S = "SandboxConfig."
        options = self.kubernetes or {}
        if not isinstance(options, dict) or not all(isinstance(v, str) and v for v in options.values()):
            _fail(S + "kubernetes", "expected a dict of option to a non-empty string, got %r" % (options,))
        unknown = sorted(set(options) - set(KUBERNETES_OPTIONS))
        if unknown:
            _fail(S + "kubernetes", "unknown option %s (expected %s)" % (", ".join(unknown), ", ".join(KUBERNETES_OPTIONS)))
        if self.gpu is not None and not 1 <= self.gpu_count <= 64:
            _fail(S + "gpu_count", "1 to 64 nvidia.com/gpu, got %r" % (self.gpu_count,))
        if self.models or any(repo.is_local for repo in self.repos):
            _fail(S + ("models" if self.models else "repos"), "backend 'kubernetes' cannot mount this machine's files; "
                  "keep them on a PersistentVolumeClaim (volumes={'/weights': 'CLAIM'})")
        for target, name in self.volumes.items():
            if not _KUBERNETES_NAME.match(name) or target.startswith("/run/gpubox"):
                _fail("%svolumes[%r]" % (S, target), "with backend 'kubernetes', the name of a PersistentVolumeClaim "
                      "of the namespace, got %r" % (name,))

    def needs_network(self) -> List[str]:
        """What needs the network (packages by name, remote repos); empty when nothing does."""
        needs = ["python_packages %r" % p for p in self.python_packages if not is_local_path(p)]
        needs += ["system_packages %r" % p for p in self.system_packages]
        needs += ["repo %r" % r.url for r in self.repos if not r.is_local]
        return needs

    def check_local(self):
        """The checks that read this machine: secrets set here, local files, dirs, models and volumes present."""
        S = "SandboxConfig."
        for name in self.secrets:
            if name not in os.environ:
                _fail(S + "secrets", "%s is not set in this environment (export it first)" % name)
        for where, pairs, test in (("local_files", self.local_files, os.path.isfile),
                                   ("local_dirs", self.local_dirs, os.path.isdir)):
            for i, (local, _) in enumerate(pairs):
                if not test(local):
                    _fail("%s%s[%d]" % (S, where, i), "%s is not a %s on this machine"
                          % (local, "file" if where == "local_files" else "directory"))
        # The backend's own volumes by name (Modal's) are not on this machine.
        for target, source in self.volumes.items() if not backends.backend(self.backend).volumes_by_name else ():
            if not os.path.isdir(source.rsplit(":ro", 1)[0] if source.endswith(":ro") else source):
                _fail("%svolumes[%r]" % (S, target), "%s is not a directory on this machine" % source)
        for model in self.models:
            model.local_path()
            model.local_base_model()
        if not backends.backend(self.backend).volumes_by_name:
            for model in self.model_host or ():
                model.local_paths()
        for package in self.python_packages:
            if is_local_path(package) and not os.path.exists(os.path.expanduser(package)):
                _fail(S + "python_packages", "%s does not exist on this machine" % package)
        for repo in self.repos:
            if repo.is_local and not os.path.isdir(os.path.expanduser(repo.url)):
                _fail("RepoConfig(%r).url" % repo.url, "not a directory on this machine")
