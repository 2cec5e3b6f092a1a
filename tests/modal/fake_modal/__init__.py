"""A fake Modal control plane for tests: a grpclib server on loopback built
from the service definitions the `modal` wheel ships (modal_proto), which
lets the real, unmodified SDK run offline (MODAL_SERVER_URL). Each sandbox is
a real podman container (sandboxes.py)."""
