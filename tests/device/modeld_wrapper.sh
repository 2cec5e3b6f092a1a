#!/usr/bin/env bash
# gpubox-modeld as carried to a GPU machine (tests/device/prepare.sh installs
# this as bin/gpubox-modeld, the real binary in libexec/): finds that
# machine's torch package, refuses a torch of another version than the one
# modeld was built against (naming both, before the loader could fail on a
# missing symbol), and runs modeld with that torch's libraries, its nvidia-*
# libraries and the carried lib/ on the library path.
#
# Environment: GPUBOX_DEVICE_PYTHON (default python3), whose torch is used;
# GPUBOX_TORCH_DIR (a torch package directory: skips the look-up).
set -euo pipefail
carry=$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)
python=${GPUBOX_DEVICE_PYTHON:-python3}
torch_dir=${GPUBOX_TORCH_DIR:-}
if [ -z "$torch_dir" ]; then
  # find_spec, not import: the look-up costs milliseconds, importing torch seconds.
  torch_dir=$("$python" -c 'import importlib.util, os
spec = importlib.util.find_spec("torch")
print(os.path.dirname(spec.origin) if spec and spec.origin else "")' 2>/dev/null) || torch_dir=""
  [ -n "$torch_dir" ] || { echo "gpubox-modeld: $python has no torch package (set GPUBOX_DEVICE_PYTHON or GPUBOX_TORCH_DIR)" >&2; exit 127; }
fi
built=$(cat "$carry/torch-version")
found=$(sed -n "s/^__version__ *= *['\"]\([^'\"+]*\).*/\1/p" "$torch_dir/version.py" 2>/dev/null | head -n1)
if [ "$found" != "$built" ]; then
  echo "gpubox-modeld: built against torch $built, but this machine's torch is ${found:-of no readable version} ($torch_dir):" \
    "prepare the carry again with build/venv's torch pinned to ${found:-that version} (tests/device/prepare.sh)" >&2
  exit 2
fi
libs="$carry/lib:$torch_dir/lib"
for dir in "$torch_dir"/../nvidia/*/lib "$torch_dir"/../nvidia/*/*/lib; do
  [ -d "$dir" ] && libs+=":$(cd "$dir" && pwd)"
done
export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
exec "$carry/libexec/gpubox-modeld" "$@"
