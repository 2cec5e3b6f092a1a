#!/usr/bin/env bash
# What the Kubernetes backend's tests (tests/kubernetes) need: the test
# kube-apiserver built from tests/kubernetes/apiserver into
# build/deps/kube-apiserver/kube-apiserver, and the CRDs of agent-sandbox and
# Kueue, fetched as Go modules into build/deps/gomod (as scripts/setup.sh
# fetches Docker's seccomp profile). Idempotent: the build is skipped while
# build/deps/kube-apiserver/stamp holds the sha256 of go.mod, go.sum, main.go
# and `go version`.
#
# The build uses the default GOCACHE and GOMODCACHE, so a machine whose Go
# caches are warm rebuilds in seconds; a cold build (all of k8s.io/kubernetes
# and etcd, 561 MB of modules from the Go module proxy) took 6 minutes on 2
# cores (16 at GOMAXPROCS=1) and needs about 3 GB of memory. It needs Go 1.26
# or later (k8s.io/kubernetes v1.37 does); Debian 12's golang-go is older.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
deps="$root/build/deps"
src="$root/tests/kubernetes/apiserver"
out="$deps/kube-apiserver"
export GOFLAGS=-modcacherw GOTOOLCHAIN=local

go_minor=$(go env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')
if ! [ "$go_minor" -ge 26 ] 2>/dev/null; then
  echo "setup_kubernetes: $(go env GOVERSION) is too old to build the test kube-apiserver: install Go 1.26 or later" >&2
  exit 1
fi

stamp_text=$( (cat "$src/go.mod" "$src/go.sum" "$src/main.go"; go version) | sha256sum | cut -d' ' -f1)
if [ -x "$out/kube-apiserver" ] && [ "$(cat "$out/stamp" 2>/dev/null)" = "$stamp_text" ]; then
  echo "setup_kubernetes: kube-apiserver is current"
else
  echo "setup_kubernetes: building the test kube-apiserver (k8s.io/kubernetes v1.37.2 + etcd v3.7.0; 10-16 min with cold Go caches)"
  mkdir -p "$out"
  start=$SECONDS
  # Built beside the old binary and renamed over it, so a running test keeps a whole file.
  (cd "$src" && go build -trimpath -ldflags='-s -w' -o "$out/kube-apiserver.new" .)
  mv -f "$out/kube-apiserver.new" "$out/kube-apiserver"
  echo "$stamp_text" > "$out/stamp"
  echo "setup_kubernetes: built in $((SECONDS - start)) s"
fi

# The CRDs the tests install, at the versions the backend targets.
for module in sigs.k8s.io/agent-sandbox@v1.0.1 sigs.k8s.io/kueue@v0.17.0; do
  if [ ! -d "$deps/gomod/$module" ]; then
    echo "setup_kubernetes: fetching $module from the Go module proxy (its CRDs)"
    mkdir -p "$deps"
    (cd "$deps" && GOMODCACHE="$deps/gomod" go mod download "$module")
  fi
done
echo "setup_kubernetes: ok"
