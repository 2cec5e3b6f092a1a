#!/usr/bin/env bash
# Demo: gpubox-agent as PID 1 of a fresh PID namespace — supervising, reaping,
# shutting down. Usage: demo_pid1.sh PATH/TO/gpubox-agent
set -euo pipefail
agent=$(realpath "$1")
work=$(mktemp -d /tmp/gpubox-demo.XXXXXX)
trap 'rm -rf "$work"' EXIT
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
log_story() {  # the agent's JSON log, one plain sentence per line
  /usr/bin/python3 - "$work/state/agent.log" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line)
    who = e.get("child") or ""
    text = {
        "agent starting": f"agent started as pid {e.get('pid')} ({e.get('mode')})",
        "child started": f"started {who} (pid {e.get('pid')})",
        "child exited": f"{who} {e.get('status')}",
        "child failed: gave up restarting": f"gave up on {who}: too many restarts",
        "agent ready": "ready",
        "forwarding signal": f"forwarded {e.get('signal')} to the children",
        "shutting down": f"shutting down ({e.get('reason')}), grace {e.get('grace_ms')} ms",
        "killing what is left": "grace over: killing what is left",
        "agent exiting": f"exiting with status {e.get('exit_code')}",
    }.get(e["msg"])
    if text: print(f"  {e['ts'][11:23]}  {text}")
PY
}

cat > "$work/config.json" <<JSON
{
  "state_dir": "$work/state",
  "log": { "stderr": false },
  "shutdown": { "grace_seconds": 2 },
  "children": [
    { "name": "worker", "argv": ["/bin/sh", "-c", "exec 2>/dev/null; trap 'exit 0' TERM; while :; do sleep 0.1; done"],
      "restart": "always" },
    { "name": "flaky", "argv": ["/bin/sh", "-c", "sleep 0.2; exit 3"],
      "restart": "on-failure", "backoff_initial_ms": 100, "max_restarts": 3 },
    { "name": "orphan-maker", "argv": ["/bin/sh", "-c", "for i in \$(seq 200); do (sleep 0.3 &) ; done; sleep 1"],
      "restart": "never" }
  ]
}
JSON

say "1. Start gpubox-agent as PID 1 of a new PID namespace"
echo "   Like a container's init, it is the first process of its own process tree."
echo "   Its config declares three children: 'worker' (runs until told to stop),"
echo "   'flaky' (fails after 0.2 s; restart on failure, at most 3 times) and"
echo "   'orphan-maker' (leaves 200 orphaned processes behind)."
unshare --pid --fork --mount-proc "$agent" --config "$work/config.json" &
launcher=$!
agent_pid=""
for _ in $(seq 100); do agent_pid=$(pgrep -P "$launcher" || true); [ -n "$agent_pid" ] && break; sleep 0.02; done
echo "   host pid of the agent: $agent_pid; inside its namespace it is pid $(grep NSpid /proc/$agent_pid/status | awk '{print $3}')"

say "2. Supervising: wait 2.5 s and look at what happened"
sleep 2.5
log_story
echo "   'flaky' was restarted with a growing delay (100, 200, 400 ms) and then given up on,"
echo "   while 'worker' kept running."

say "3. Reaping: the 200 orphans were adopted by PID 1 and reaped"
zombies=$(awk -v p="$agent_pid" '$3=="Z" && $4==p' /proc/[0-9]*/stat 2>/dev/null | wc -l)
echo "   children of the agent now: $(pgrep -c -P "$agent_pid" || true) (the worker); zombies among them: $zombies"

say "4. Shut down: SIGTERM to the agent"
echo "   It sends TERM to every child's process group, waits up to the 2 s grace, kills what is left."
start=$(date +%s%N)
kill -TERM "$agent_pid"
status=0; wait "$launcher" || status=$?
echo "   agent exited with status $status after $(( ($(date +%s%N) - start) / 1000000 )) ms"
log_story | tail -n 3
echo
if [ "$status" = 0 ]; then
  echo "Done: every child ended within the grace, nothing was left behind, exit status 0."
else
  echo "Done: the agent exited with status $status (see the log above)."
fi
