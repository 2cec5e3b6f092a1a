#!/usr/bin/env bash
# Puts gpubox and gpubox-agent on PATH: symlinks in /usr/local/bin (or $1) to
# this checkout's build/bin, which must be built. Idempotent. Without write
# access there, prints the one line to add to your shell instead.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-/usr/local/bin}
for program in gpubox gpubox-agent; do
  if [ ! -x "$root/build/bin/$program" ]; then
    echo "install: $root/build/bin/$program is not built yet (scripts/build.sh default)" >&2
    exit 1
  fi
done
if [ -w "$bin" ]; then
  for program in gpubox gpubox-agent; do ln -sfn "$root/build/bin/$program" "$bin/$program"; done
  echo "install: $bin/gpubox and $bin/gpubox-agent now point into $root/build/bin"
else
  echo "install: cannot write $bin; add this line to your shell's profile instead:"
  echo "  export PATH=\"$root/build/bin:\$PATH\""
fi
