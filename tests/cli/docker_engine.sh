#!/usr/bin/env bash
# The Docker engine of the docker backend's tests (ctest fixture gpubox_docker):
# Debian's dockerd (docker.io, installed by scripts/setup.sh) on a socket of
# its own, with no iptables rules and no bridge (a sandbox's port is relayed
# or published on 127.0.0.1). Its data root is kept between runs, outside the
# checkout, so the test image loads again only when it changed.
#   tests/cli/docker_engine.sh start|stop
# The tests reach it through DOCKER_HOST=unix:///run/gpubox-test-docker/docker.sock.
set -euo pipefail
data=/var/lib/gpubox-test-docker
run=/run/gpubox-test-docker
export DOCKER_HOST=unix://$run/docker.sock

running() { [ -f "$run/dockerd.pid" ] && kill -0 "$(cat "$run/dockerd.pid")" 2>/dev/null; }

case "${1:-}" in
  start)
    mkdir -p "$data" "$run"
    if running; then "$0" stop; fi
    command -v dockerd >/dev/null || { echo "dockerd is missing: run scripts/setup.sh (docker.io)" >&2; exit 1; }
    setsid dockerd --data-root "$data" --exec-root "$run/exec" --pidfile "$run/dockerd.pid" -H "$DOCKER_HOST" \
      --iptables=false --ip6tables=false --bridge=none --log-level warn </dev/null >"$run/dockerd.log" 2>&1 &
    for _ in $(seq 1 300); do
      if docker version --format '{{.Server.Version}}' >/dev/null 2>&1; then
        echo "dockerd $(docker version --format '{{.Server.Version}}') on $DOCKER_HOST"
        exit 0
      fi
      sleep 0.1
    done
    echo "dockerd did not answer within 30 s:" >&2
    tail -20 "$run/dockerd.log" >&2
    exit 1
    ;;
  stop)
    if running; then
      pid=$(cat "$run/dockerd.pid")
      kill -TERM "$pid"
      for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; fi
    fi
    echo "dockerd stopped"
    ;;
  *)
    echo "usage: $0 start|stop" >&2
    exit 2
    ;;
esac
