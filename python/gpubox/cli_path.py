"""Where the `gpubox` CLI binary is: $GPUBOX_CLI, else `gpubox` on PATH, else
this checkout's build/bin/gpubox (python/gpubox/../../build/bin)."""

import os
import shutil


def find_cli() -> str:
    """The absolute path of the gpubox CLI; FileNotFoundError says where it looked."""
    given = os.environ.get("GPUBOX_CLI", "")
    if given:
        if not os.access(given, os.X_OK):
            raise FileNotFoundError("GPUBOX_CLI=%s is not an executable file" % given)
        return os.path.abspath(given)
    on_path = shutil.which("gpubox")
    if on_path:
        return os.path.abspath(on_path)
    checkout = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "build", "bin", "gpubox")
    if os.access(checkout, os.X_OK):
        return os.path.realpath(checkout)
    raise FileNotFoundError("the gpubox CLI was not found: set GPUBOX_CLI, put gpubox on PATH, "
                            "or build it (cmake --build build --target gpubox) into %s" % os.path.realpath(checkout))
