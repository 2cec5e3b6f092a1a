// How a sandbox whose agent is gone ended. The agent leaves its own record,
// exit.json (SandboxRecord::agent_files_dir(): STORE/sandboxes/ID/host for a local sandbox), as it
// exits; without one the agent did not exit by itself in order, and the host
// tells what it can: an OOM kill its memory cgroup counted, else a crash or a
// kill from outside. Reads files only; any thread. Which of these applies to a
// record is its backend's to say (Backend::end, host/sandboxes/state.h).
#pragma once

#include <optional>
#include <string>

#include "host/sandbox_store.h"

namespace gpubox::host {

struct SandboxEnd {
  // terminated, shutdown, idle_timeout, lease_expired, deadline,
  // main_command_ended (from the agent); out_of_memory, agent_crashed (inferred);
  // exited (a docker container: only the engine's exit code is trusted);
  // or a reason of the backend's own (its control plane's, in message).
  std::string reason;
  std::string message;  // one sentence for `info` and errors
  std::optional<int> exit_code;  // the agent's, when it wrote its record or its engine recorded it
};

// The end of a sandbox whose agent's state dir is on this host (exit.json, its memory cgroup).
SandboxEnd sandbox_end_on_host(const SandboxRecord& record);
// The label of a reason ("idle_timeout" -> "idle timeout").
std::string sandbox_end_label(const std::string& reason);

}  // namespace gpubox::host
