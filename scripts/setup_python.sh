#!/usr/bin/env bash
# Creates build/venv, the virtual environment of the PyPI peers the tests
# compare against (transformers, tokenizers, safetensors, torch 2.x, whose
# libtorch gpubox-modeld links), from the pinned lock file. Interpreter:
# Debian's /usr/bin/python3 (python3-venv), so a fresh Debian 12 machine needs
# nothing else; pip reaches PyPI and keeps its cache outside the checkout.
# Idempotent: redone only when the lock file changes.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/build/venv"
lock="$root/scripts/python/requirements-test.lock"
stamp_text=$(sha256sum "$lock" | cut -c1-16)
if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.gpubox-lock" 2>/dev/null)" = "$stamp_text" ]; then
  echo "setup_python: ok (build/venv)"
  exit 0
fi
echo "setup_python: creating build/venv from scripts/python/requirements-test.lock (torch's wheel is large: minutes the first time)"
rm -rf "$venv"
/usr/bin/python3 -m venv "$venv"
"$venv/bin/pip" install -q --no-input -r "$lock"
echo "$stamp_text" > "$venv/.gpubox-lock"
echo "setup_python: ok (build/venv)"
