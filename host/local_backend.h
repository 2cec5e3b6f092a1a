// The local backend: a sandbox is gpubox-agent running as PID 1 of new PID,
// mount, UTS and IPC namespaces (and a network namespace with only loopback
// unless the network is "host"), with a private /proc, /tmp, /dev/shm and work
// dir (/workspace), resource limits from resource_limits.h, and its RPC socket
// in the sandbox's store directory. The agent is detached from the CLI: it
// outlives the process that created it. One thread; forks.
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "host/resource_limits.h"
#include "host/sandbox_store.h"
#include "rpc/status.h"

namespace gpubox::host {

// Where the sandbox sees its own parts.
inline constexpr char kSandboxStateDir[] = "/run/gpubox";
inline constexpr char kSandboxWorkDir[] = "/workspace";

struct BindMount {
  std::string source;  // a host path (absolute)
  std::string target;  // a sandbox path (absolute)
  bool read_only = false;
};

struct LocalSandboxSpec {
  std::string name;
  std::string agent_path;       // the gpubox-agent binary
  // The agent's whole config document, secrets included: it travels through a
  // memfd to --config-fd and is never written to a file nor put in argv.
  nlohmann::json agent_config = nlohmann::json::object();
  ResourceLimits limits;
  bool network_none = true;
  std::vector<BindMount> mounts;
  std::chrono::milliseconds ready_timeout{10'000};
  // What the record keeps of the request (no secret values).
  nlohmann::json public_spec = nlohmann::json::object();
};

// Creates and starts a sandbox and waits until its agent is ready. On any
// failure nothing is left behind (process, cgroups, state). invalid_request
// when the agent refused its config (the message is the agent's).
Result<SandboxRecord> create_local_sandbox(SandboxStore& store, const LocalSandboxSpec& spec);

// SIGTERM to the agent, up to grace (plus a second) for it to exit, SIGKILL,
// then its cgroups and state removed. A dead agent is only cleaned up.
// *killed tells whether SIGKILL was needed.
Status terminate_local_sandbox(const SandboxStore& store, const SandboxRecord& record,
                               std::chrono::milliseconds grace, bool* killed = nullptr);

// The path of the gpubox-agent binary: $GPUBOX_AGENT, else beside this executable.
std::string default_agent_path();

}  // namespace gpubox::host
