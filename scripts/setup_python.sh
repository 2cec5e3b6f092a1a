#!/usr/bin/env bash
# Creates the virtual environments of the PyPI peers the tests compare against,
# each from its pinned lock file, with Debian's /usr/bin/python3 (python3-venv),
# so a fresh Debian 12 machine needs nothing else; pip reaches PyPI and keeps
# its cache outside the checkout.
#   build/venv          scripts/python/requirements-test.lock: transformers,
#                       tokenizers, safetensors, transformer-lens 4, torch 2.x
#                       (whose libtorch gpubox-modeld links)
#   build/venv-saelens  scripts/python/requirements-saelens.lock: sae-lens and
#                       the transformer-lens 3 it requires; torch and its CUDA
#                       wheels are build/venv's, linked in, not installed again
#   build/venv-inspect  scripts/python/requirements-inspect.lock: inspect_ai and
#                       pytest, and this checkout's python/ installed editable
#                       with its [inspect] extra (the `gpubox` sandbox entry point)
# Usage: setup_python.sh [venv|venv-saelens|venv-inspect]... (none: all; the demo needs venv).
# Idempotent: a venv is left alone while its stamp (its lock's hash; for
# venv-saelens both locks'; for venv-inspect also the checkout's path, which its
# editable install names) matches, or its installed versions equal its lock.
# A venv that is a symlink (a worktree sharing the main checkout's) is never
# deleted: out of date, it is an error.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
locks="$root/scripts/python"

# Whether the venv $1 has exactly the versions that the lock $2 names.
matches_lock() {
  "$1/bin/python" -c '
import importlib.metadata, sys
for line in open(sys.argv[1]):
    name, _, version = line.split("#")[0].strip().partition("==")
    if name and importlib.metadata.version(name) != version:
        sys.exit(1)' "$2" 2>/dev/null
}

# $1: the venv under build/, $2: its lock, $3: its stamp, $4...: what installs
# the lock into the new, empty venv.
ensure_venv() {
  local name=$1 lock=$2 stamp=$3 venv="$root/build/$1"
  shift 3
  # venv-inspect's stamp alone says whether its editable install names this checkout.
  if [ -x "$venv/bin/python" ] && { [ "$(cat "$venv/.gpubox-lock" 2>/dev/null)" = "$stamp" ] ||
                                    { [ "$name" != venv-inspect ] && matches_lock "$venv" "$lock"; }; }; then
    echo "setup_python: ok (build/$name)"
    return
  fi
  if [ -L "$venv" ]; then
    echo "setup_python: build/$name, a symlink to $(readlink "$venv"), does not match ${lock#"$root/"}: update that venv" >&2
    exit 1
  fi
  echo "setup_python: creating build/$name from ${lock#"$root/"}"
  rm -rf "$venv"
  /usr/bin/python3 -m venv "$venv"
  "$@"
  echo "$stamp" > "$venv/.gpubox-lock"
  echo "setup_python: ok (build/$name)"
}

install_test() {
  echo "setup_python: torch's wheel is large: minutes the first time"
  "$root/build/venv/bin/pip" install -q --no-input -r "$locks/requirements-test.lock"
}

# build/venv's torch, triton and cuda-*/nvidia-* wheels, linked into
# build/venv-saelens/shared-torch, which a .pth puts on sys.path after the venv's
# own site-packages: pip finds the locked torch installed and fetches the rest.
install_saelens() {
  local venv="$root/build/venv-saelens" from site
  from=$("$root/build/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  mkdir "$venv/shared-torch"
  "$root/build/venv/bin/python" -c '
import importlib.metadata, re, sys
entries = set()
for dist in importlib.metadata.distributions(path=[sys.argv[1]]):
    if re.fullmatch(r"torch|triton|cuda-.*|nvidia-.*", dist.metadata["Name"].lower().replace("_", "-")):
        entries.add(dist._path.name)
        entries.update(f.parts[0] for f in dist.files or [] if f.parts[0] not in ("..", dist._path.name))
print("\n".join(sorted(entries)))' "$from" | while read -r entry; do ln -s "$from/$entry" "$venv/shared-torch/$entry"; done
  echo "$venv/shared-torch" > "$site/gpubox-shared-torch.pth"
  "$venv/bin/pip" install -q --no-input -r "$locks/requirements-saelens.lock"
}

# The lock, then gpubox itself: editable, so the entry point Inspect finds is this checkout's code.
install_inspect() {
  "$root/build/venv-inspect/bin/pip" install -q --no-input -r "$locks/requirements-inspect.lock"
  "$root/build/venv-inspect/bin/pip" install -q --no-input --no-deps --no-build-isolation -e "$root/python"
}

test_stamp=$(sha256sum "$locks/requirements-test.lock" | cut -c1-16)
saelens_stamp=$(cat "$locks/requirements-test.lock" "$locks/requirements-saelens.lock" | sha256sum | cut -c1-16)
inspect_stamp=$( (cat "$locks/requirements-inspect.lock" "$root/python/pyproject.toml"; echo "$root") | sha256sum | cut -c1-16)
names=("$@")
[ $# -gt 0 ] || names=(venv-saelens venv-inspect)  # build/venv first, then build/venv-saelens
for name in "${names[@]}"; do
  case $name in
    venv) ensure_venv venv "$locks/requirements-test.lock" "$test_stamp" install_test ;;
    venv-saelens)
      ensure_venv venv "$locks/requirements-test.lock" "$test_stamp" install_test  # its torch is build/venv's
      ensure_venv venv-saelens "$locks/requirements-saelens.lock" "$saelens_stamp" install_saelens ;;
    venv-inspect) ensure_venv venv-inspect "$locks/requirements-inspect.lock" "$inspect_stamp" install_inspect ;;
    *) echo "setup_python: unknown venv '$name' (venv, venv-saelens, venv-inspect)" >&2; exit 2 ;;
  esac
done
