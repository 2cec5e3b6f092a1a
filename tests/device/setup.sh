#!/usr/bin/env bash
# The first step of tests/device/run.sh, on the GPU machine: on cuda a usable
# CUDA first (torch.cuda.is_available() and at least one device, else it
# fails at once naming the NVIDIA driver's version and the CUDA torch was
# built for, so that no later step fails slowly on an old driver); the carry
# checked against its MANIFEST (a missing file named); pyzmq installed from
# its wheels into SITE; the binaries installed under PREFIX (a local sandbox
# hides /root and /home and has its own /tmp, where the checkout may be); the
# wrapper's torch check.
#
#   tests/device/setup.sh cuda|cpu     (run.sh runs it, capped)
# Environment (run.sh sets them): PYTHON, CARRY, PREFIX, SITE.
# Exit 0: ready; 1: what is wrong is the last line.
set -uo pipefail
device=${1:?usage: tests/device/setup.sh cuda|cpu}
: "${PYTHON:?}" "${CARRY:?}" "${PREFIX:?}" "${SITE:?}"

# One interpreter start for every question asked of the machine's torch (importing it takes seconds).
said=$("$PYTHON" - "$device" <<'PY'
import sys
try:
    import torch, transformers, safetensors, numpy, msgpack  # noqa: F401
except ImportError as e:
    print("%s lacks %s (the GPU machine has torch, transformers, safetensors, numpy, msgpack)" % (sys.executable, e.name))
    sys.exit(1)
print("python", sys.version.split()[0], "torch", torch.__version__, "built for CUDA", torch.version.cuda,
      "transformers", transformers.__version__, flush=True)
if sys.argv[1] == "cuda":
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        print("torch.cuda.is_available() is %s with %d devices; torch %s is built for CUDA %s"
              % (torch.cuda.is_available(), torch.cuda.device_count(), torch.__version__, torch.version.cuda))
        sys.exit(3)
    print("cuda devices:", ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())))
PY
)
code=$?
echo "$said"
if [[ $code == 3 ]]; then
  driver="unknown (no nvidia-smi)" supports=unknown
  if command -v nvidia-smi >/dev/null; then
    driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>&1 | head -n1)
    supports=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -n1)
  fi
  echo "CUDA is unusable here: $(tail -n1 <<<"$said"); the NVIDIA driver is $driver" \
    "(nvidia-smi: CUDA up to ${supports:-unknown}): a driver older than torch's CUDA needs, or no device visible"
  exit 1
fi
[[ $code == 0 ]] || exit 1

[[ -f "$CARRY/MANIFEST" ]] || { echo "missing carried file: $CARRY/MANIFEST (run tests/device/prepare.sh here, and carry build/device-carry)"; exit 1; }
missing=0
while read -r hash path; do
  [[ -f "$CARRY/$path" ]] || { echo "missing carried file: $CARRY/$path"; missing=1; }
done < "$CARRY/MANIFEST"
[[ $missing == 0 ]] || { echo "(run tests/device/prepare.sh here, and carry build/device-carry)"; exit 1; }
(cd "$CARRY" && sha256sum --quiet -c MANIFEST) || { echo "a carried file differs from its MANIFEST: prepare again"; exit 1; }

"$PYTHON" -m pip install -q --no-index --no-deps --no-compile --disable-pip-version-check \
  --find-links "$CARRY/wheels" --target "$SITE" pyzmq || { echo "no carried pyzmq wheel fits $PYTHON"; exit 1; }
rm -rf "$PREFIX" && mkdir -p "$PREFIX/lib" &&
  cp -a "$CARRY/bin" "$CARRY/libexec" "$CARRY/torch-version" "$PREFIX/" &&
  { [[ ! -d "$CARRY/lib" ]] || cp -a "$CARRY/lib/." "$PREFIX/lib/"; } || { echo "cannot install into $PREFIX"; exit 1; }
"$PREFIX/bin/gpubox-modeld" --torch-version >/dev/null || exit 1
[[ $device == cpu ]] || nvidia-smi -L
echo "ready: $(tr '\n' ';' <<<"$said" | sed 's/;$//; s/;/; /g')"  # the summary's line for setup
