#!/usr/bin/env bash
# Installs every Debian package gpubox needs and builds a static libzmq from
# Debian's own source package. Idempotent: a second run installs nothing and
# reuses the libzmq already built under build/deps.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
deps="$root/build/deps"

packages=(
  build-essential cmake ninja-build ccache pkg-config file git dpkg-dev patch patchelf util-linux procps
  clang libclang-rt-14-dev
  xeus-dev xtl-dev uuid-dev cppzmq-dev libsodium-dev libmsgpack-cxx-dev libspdlog-dev libfmt-dev
  nlohmann-json3-dev libssl-dev libgtest-dev libgmock-dev
  libseccomp-dev libarchive-dev libzstd-dev zstd tar liblz4-dev libacl1-dev libbz2-dev liblzma-dev zlib1g-dev nettle-dev
  python3 python3-zmq python3-msgpack python3-jupyter-client python3-nbclient
  python3-ipykernel python3-jupyter-kernel-test python3-matplotlib jupyter-console python3-comm
  python3-torch python3-venv libpcre2-dev libutf8proc-dev
  libgloo-dev
  docker.io
)
# Node.js and npm for scripts/setup_npm.sh, from Debian only where no npm is
# installed (NodeSource's nodejs bundles npm and conflicts with Debian's npm).
if ! command -v npm >/dev/null; then packages+=(nodejs npm); fi
# Go, for `go mod download` of Docker's seccomp profile below, from Debian
# only where no go is installed.
if ! command -v go >/dev/null; then packages+=(golang-go); fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

# deb-src for the same suites as the binary sources, so `apt-get source` works:
# from Debian's deb822 debian.sources (its images, its installer today) or,
# on a root made by debootstrap, from the one-line sources.list.
src_list=/etc/apt/sources.list.d/gpubox-deb-src.sources
src_lines=/etc/apt/sources.list.d/gpubox-deb-src.list
need_update=0
if [ ! -f "$src_list" ] && [ ! -f "$src_lines" ]; then
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources > "$src_list"
  else
    sed -n 's/^deb /deb-src /p' /etc/apt/sources.list > "$src_lines"
  fi
  need_update=1
fi
# libzmq's build flags; the cached build is redone whenever they change.
# Drafts on: the RPC server uses ZMQ_ROUTER_NOTIFY to see clients disconnect.
zmq_flags="-DCMAKE_BUILD_TYPE=Release -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DBUILD_SHARED=OFF -DBUILD_STATIC=ON \
-DBUILD_TESTS=OFF -DENABLE_DRAFTS=ON -DENABLE_WS=OFF -DWITH_TLS=OFF -DWITH_LIBSODIUM=ON -DENABLE_CURVE=ON -DWITH_LIBBSD=OFF -DWITH_GSSAPI=OFF \
-DWITH_NORM=OFF -DWITH_OPENPGM=OFF -DWITH_VMCI=OFF -DWITH_DOCS=OFF -DENABLE_CPACK=OFF"
# Patches applied to Debian's source, in name order (scripts/zmq-patches/*.patch;
# each says what it changes and why); their checksum is part of the stamp.
zmq_patches=("$root"/scripts/zmq-patches/*.patch)
zmq_stamp_text="$zmq_flags patches:$(cat "${zmq_patches[@]}" | sha256sum | cut -c1-16)"
zmq_stamp="$deps/zmq-build-flags"
zmq_current=0
if [ -f "$deps/lib/libzmq.a" ] && [ "$(cat "$zmq_stamp" 2>/dev/null)" = "$zmq_stamp_text" ]; then zmq_current=1; fi

if [ ${#missing[@]} -gt 0 ] || [ "$zmq_current" = 0 ]; then
  [ ${#missing[@]} -gt 0 ] && need_update=1
  if [ "$need_update" = 1 ]; then apt-get update -qq; fi
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ "$zmq_current" = 0 ]; then
  echo "setup: building static libzmq from Debian's zeromq3 source (once; cached in build/deps)"
  rm -rf "$deps/src" "$deps/staging" && mkdir -p "$deps/src"
  (cd "$deps/src" && apt-get source -qq zeromq3 >/dev/null 2>&1)
  zsrc=$(find "$deps/src" -maxdepth 1 -type d -name 'zeromq3-*' | head -n1)
  for zmq_patch in "${zmq_patches[@]}"; do patch -d "$zsrc" -p1 --quiet --forward < "$zmq_patch"; done
  # shellcheck disable=SC2086  # zmq_flags is a list of words
  cmake -S "$zsrc" -B "$deps/src/build" -G Ninja $zmq_flags -DCMAKE_INSTALL_PREFIX="$deps/staging" >/dev/null
  cmake --build "$deps/src/build" >/dev/null
  cmake --install "$deps/src/build" >/dev/null
  # Swap the new build in with renames, so a concurrent link sees the old or the new library.
  mkdir -p "$deps/lib" "$deps/include"
  for header in "$deps/staging/include/"*; do mv -f "$header" "$deps/include/"; done
  mv -f "$deps/staging/lib/libzmq.a" "$deps/lib/libzmq.a"
  echo "$zmq_stamp_text" > "$zmq_stamp"
  rm -rf "$deps/src" "$deps/staging"
fi
# Docker's default seccomp profile, which tests/unit/seccomp_profile_test.cpp
# compares gpubox's table (agent/seccomp_profile.cpp) with: default.json of
# the Go module github.com/moby/profiles/seccomp, from the Go module proxy,
# cached in build/deps/gomod (the version is the one that file names).
moby_seccomp=github.com/moby/profiles/seccomp@v0.3.0
if [ ! -f "$deps/gomod/$moby_seccomp/default.json" ]; then
  echo "setup: fetching Docker's seccomp profile ($moby_seccomp) from the Go module proxy"
  mkdir -p "$deps"
  (cd "$deps" && GOMODCACHE="$deps/gomod" GOFLAGS=-modcacherw GOTOOLCHAIN=local go mod download "$moby_seccomp")
fi
echo "setup: ok"
