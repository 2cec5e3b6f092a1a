#!/usr/bin/env bash
# Installs what the container tests need (Debian's podman with runc, netavark
# and iptables; slirp4netns for the sandboxes the fake Modal lets out to the
# host, tests/modal/test_model_pull.py; debootstrap; busybox-static), configures podman for this kind
# of host, and builds the local base images the image tests put under
# image/Dockerfile (there is no registry: every FROM is a local image).
# Idempotent: a base that exists already is kept (podman's storage survives
# between runs on one machine), so a warm run takes about a second.
#
# Bases (bump the tag when a recipe changes):
#   localhost/gpubox-base-minbase:bookworm-1  debootstrap --variant=minbase bookworm, no Python
#   localhost/gpubox-base-busybox:1           a root with busybox-static only
#   localhost/gpubox-base-torch:bookworm-1    minbase + python3 with a venv on PATH (/opt/python)
#                                             holding PyPI's torch: the CUDA + PyTorch stand-in
#                                             (rebuilt when tests/image/python-standin.lock changes)
#   localhost/gpubox-base-device:1            the torch base + what the GPU machine's Python has
#                                             that tests/device/run.sh imports (transformers, peft,
#                                             safetensors, numpy, msgpack), in that machine's versions
#                                             where tests/device/python-device.lock pins them
#                                             (transformers 5.17); no compiler, no pyzmq: the GPU
#                                             machine's stand-in of tests/device/rehearse.sh
#
# The wheelhouse: every wheel of tests/image/python-standin.lock (and in its
# folder device-python/, those of tests/device/python-device.lock), downloaded
# by build/venv's pip (from its cache or PyPI) into $GPUBOX_WHEELHOUSE
# (default /var/cache/gpubox/wheels, outside the checkout like pip's cache).
# The torch base installs from it and the image tests mount it into their
# builds (PYTHON_SETUP=pip), so no image build goes to a registry but Debian's.
set -euo pipefail
mirror=${GPUBOX_DEBIAN_MIRROR:-http://deb.debian.org/debian}

packages=(podman runc netavark iptables slirp4netns debootstrap busybox-static)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup_images: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# This host: cgroup v1 (hybrid) without systemd, where crun refuses to run and
# podman's default rlimits (nofile 1048576) exceed the hard limit.
nofile=$(ulimit -Hn)
[ "$nofile" = unlimited ] || [ "$nofile" -gt 1048576 ] && nofile=1048576
conf=/etc/containers/containers.conf.d/50-gpubox.conf
conf_text="# Written by gpubox's scripts/setup_images.sh for this host.
[containers]
default_ulimits = [\"nofile=$nofile:$nofile\", \"nproc=4096:4096\"]
[engine]
cgroup_manager = \"cgroupfs\"
runtime = \"runc\"
events_logger = \"file\"
[network]
network_backend = \"netavark\""
if [ "$(cat "$conf" 2>/dev/null)" != "$conf_text" ]; then
  mkdir -p "$(dirname "$conf")"
  printf '%s\n' "$conf_text" > "$conf"
fi

have() { podman image exists "$1"; }
work=$(mktemp -d /tmp/gpubox-bases-XXXXXX)
trap 'rm -rf "$work"' EXIT

minbase=localhost/gpubox-base-minbase:bookworm-1
if ! have "$minbase"; then
  echo "setup_images: debootstrap --variant=minbase bookworm (once; a few minutes)"
  debootstrap --variant=minbase bookworm "$work/minbase" "$mirror" >/dev/null
  rm -rf "$work/minbase/var/cache/apt/archives/"*.deb "$work/minbase/var/lib/apt/lists/"*
  tar -C "$work/minbase" -c . | podman import --change 'CMD ["/bin/bash"]' - "$minbase" >/dev/null 2>&1
fi

busybox=localhost/gpubox-base-busybox:1
if ! have "$busybox"; then
  echo "setup_images: building $busybox (once)"
  mkdir -p "$work/busybox/bin" "$work/busybox/tmp" "$work/busybox/etc"
  chmod 1777 "$work/busybox/tmp"
  cp /bin/busybox "$work/busybox/bin/busybox"
  for applet in $("$work/busybox/bin/busybox" --list); do
    [ -e "$work/busybox/bin/$applet" ] || ln -s busybox "$work/busybox/bin/$applet"
  done
  echo 'root:x:0:0:root:/root:/bin/sh' > "$work/busybox/etc/passwd"
  echo 'root:x:0:' > "$work/busybox/etc/group"
  tar -C "$work/busybox" -c . | podman import --change 'CMD ["/bin/sh"]' - "$busybox" >/dev/null 2>&1
fi
lock="$(cd "$(dirname "$0")/.." && pwd)/tests/image/python-standin.lock"
lock_key=$(sha256sum "$lock" | cut -c1-16)
wheelhouse=${GPUBOX_WHEELHOUSE:-/var/cache/gpubox/wheels}
if [ "$(cat "$wheelhouse/.gpubox-lock" 2>/dev/null)" != "$lock_key" ]; then
  echo "setup_images: downloading the stand-in's wheels into $wheelhouse (once; about 3 GB)"
  mkdir -p "$wheelhouse"
  "$(dirname "$0")/../build/venv/bin/pip" download -q --no-input --no-deps -d "$wheelhouse" -r "$lock"
  echo "$lock_key" > "$wheelhouse/.gpubox-lock"
fi
device_lock="$(cd "$(dirname "$0")/.." && pwd)/tests/device/python-device.lock"
device_lock_key=$(sha256sum "$device_lock" | cut -c1-16)
# In a folder of their own, which the image tests' --find-links /wheels does not see.
if [ "$(cat "$wheelhouse/device-python/.gpubox-lock" 2>/dev/null)" != "$device_lock_key" ]; then
  echo "setup_images: downloading the device rehearsal's wheels into $wheelhouse/device-python (once; a few MB)"
  mkdir -p "$wheelhouse/device-python"
  "$(dirname "$0")/../build/venv/bin/pip" download -q --no-input --no-deps -d "$wheelhouse/device-python" -r "$device_lock"
  echo "$device_lock_key" > "$wheelhouse/device-python/.gpubox-lock"
fi

# build_from_wheels IMAGE CONTAINERFILE KEY WHAT: builds IMAGE from CONTAINERFILE
# (the wheelhouse mounted at /wheels) unless the IMAGE there was built for
# KEY (its gpubox.recipe label); then removes the image it replaced
# (podman's storage outlives a checkout).
build_from_wheels() {
  local image=$1 containerfile=$2 key=$3 what=$4 was
  was=$(podman image inspect --format '{{.Id}} {{index .Labels "gpubox.recipe"}}' "$image" 2>/dev/null || true)
  [ "${was#* }" != "$key" ] || return 0
  echo "setup_images: building $image $what"
  podman build --isolation chroot -q --volume "$wheelhouse:/wheels:ro" --label "gpubox.recipe=$key" \
    -t "$image" -f "$containerfile" "$work" >/dev/null
  [ -z "$was" ] || podman rmi "${was%% *}" >/dev/null 2>&1 || true
}

# Rebuilt when its recipe or the lock changes.
torch=localhost/gpubox-base-torch:bookworm-1
torch_version=$(sed -n 's/^torch==//p' "$lock")
printf '%s\n' "FROM $minbase" \
  "RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \\" \
  "    python3 python3-venv >/dev/null && apt-get clean && rm -rf /var/lib/apt/lists/*" \
  "RUN python3 -m venv /opt/python && /opt/python/bin/pip install -q --no-cache-dir --no-index \\" \
  "    --find-links /wheels torch==$torch_version" \
  "ENV PATH=/opt/python/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
  > "$work/Containerfile.torch"
build_from_wheels "$torch" "$work/Containerfile.torch" "$(cat "$lock" "$work/Containerfile.torch" | sha256sum | cut -c1-16)" \
  "with torch $torch_version (once; a few minutes)"

# Rebuilt when its recipe, either lock or the torch base changes.
device=localhost/gpubox-base-device:1
cp "$device_lock" "$work/python-device.lock"
printf '%s\n' "FROM $torch" "COPY python-device.lock /tmp/python-device.lock" \
  "RUN /opt/python/bin/pip install -q --no-cache-dir --no-index --find-links /wheels \\" \
  "    --find-links /wheels/device-python -c /tmp/python-device.lock \\" \
  "    transformers peft safetensors numpy msgpack" > "$work/Containerfile.device"
build_from_wheels "$device" "$work/Containerfile.device" \
  "$( (cat "$lock" "$device_lock" "$work/Containerfile.device"; podman image inspect --format '{{.Id}}' "$torch") | sha256sum | cut -c1-16)" \
  "(once; a minute)"
echo "setup_images: ok ($minbase $busybox $torch $device)"
