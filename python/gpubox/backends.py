"""The backends a SandboxConfig may name, and the little the Python API does
differently for each: one mapping, BACKENDS, the only place in the package
that tells backends apart by name (the CLI's own is host/backends/registry.h).
Everything else a sandbox does goes through its agent, the same for all."""

from dataclasses import dataclass
from typing import Callable, Dict, Optional


def _no_checks(config) -> None:
    return None


@dataclass(frozen=True)
class Backend:
    """What SandboxConfig, plan_create and the record reader ask of one backend."""

    name: str
    open_network: str                     # `--network` for network=True ("none" otherwise); "": no --network (the cluster's)
    gpu_flag: Callable[[str, int], str]   # `--gpu` for a GPU type and a count
    takes_image: bool = True              # image= names an image to run
    volumes_by_name: bool = False         # volumes name the backend's own volumes, not dirs of this machine
    takes_app: bool = False               # modal_app= applies
    control_plane_id: str = ""            # the record's spec key of its control plane's id ("": none); its state is
                                          # then what that control plane said last (spec NAME_ended once it ended)
    checks: Callable[[object], None] = _no_checks  # its own limits on a SandboxConfig (raises ValueError)


def _check_modal(config) -> None:
    config._check_modal()


def _check_kubernetes(config) -> None:
    config._check_kubernetes()


# The registrations, in `gpubox create --help`'s order.
BACKENDS: Dict[str, Backend] = {b.name: b for b in (
    # GPU numbers of this host; the CLI refuses when it has none.
    Backend("local", "host", lambda gpu, count: ",".join(str(i) for i in range(count)), takes_image=False),
    Backend("podman", "bridge", lambda gpu, count: str(count)),
    Backend("docker", "bridge", lambda gpu, count: str(count)),
    # Modal's own GPU form: TYPE or TYPE:COUNT; its volumes are Modal Volumes by name.
    Backend("modal", "open", lambda gpu, count: gpu + (":%d" % count if count > 1 else ""),
            volumes_by_name=True, takes_app=True, control_plane_id="modal_id", checks=_check_modal),
    # A cluster's agent-sandbox: N of nvidia.com/gpu; volumes are PersistentVolumeClaims by name.
    Backend("kubernetes", "", lambda gpu, count: str(count), volumes_by_name=True, control_plane_id="kubernetes_id",
            checks=_check_kubernetes),
)}


def backend(name: str) -> Optional[Backend]:
    """The backend of that name, or None."""
    return BACKENDS.get(name)
