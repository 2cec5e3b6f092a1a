// The local backend: a sandbox is gpubox-agent running as PID 1 of new PID,
// mount, UTS and IPC namespaces (and a network namespace with only loopback
// unless the network is "host"), in a copy-on-write root of its own
// (sandbox_root.h) with its work dir (/workspace), without the capabilities
// of host root (capabilities.h), optionally as an unprivileged range of the
// host's ids (user_namespace.h) and with local GPUs (gpu_devices.h), under
// the resource limits of resource_limits.h, its RPC socket in the sandbox's
// store directory. The agent is detached from the CLI: it outlives the
// process that created it. One thread; forks.
#pragma once

#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "host/backends/backend.h"
#include "host/backends/local/gpu_devices.h"
#include "host/resource_limits.h"
#include "host/sandbox_store.h"
#include "base/safe_extractor.h"
#include "base/status.h"

namespace gpubox::host {

struct LocalSandboxSpec {
  std::string name;
  std::string agent_path;       // the gpubox-agent binary
  // The agent's whole config document, secrets included: it travels through a
  // memfd to --config-fd and is never written to a file nor put in argv.
  nlohmann::json agent_config = nlohmann::json::object();
  ResourceLimits limits;
  bool network_none = true;
  bool user_namespace = false;  // --userns: root inside is an unprivileged range outside
  bool seccomp_unconfined = false;  // --seccomp unconfined: the agent filters nothing it starts
  std::vector<BindMount> mounts;
  GpuPlan gpus;  // no indices: no GPU
  std::chrono::milliseconds ready_timeout{10'000};
  // Fills the sandbox's upper layer (a snapshot's) before anything mounts
  // it: called with the layer's path, which does not exist yet, and the ids
  // its files are stored under (the sandbox's range under --userns). Empty:
  // the layer starts empty. A failure fails the create.
  std::function<Status(const std::string& upper, const harvest::LayerIds& ids)> seed_upper;
  // What the record keeps of the request (no secret values).
  nlohmann::json public_spec = nlohmann::json::object();
};

// Creates and starts a sandbox and waits until its agent is ready. On any
// failure nothing is left behind (process, cgroups, state). invalid_request
// when the agent refused its config (the message is the agent's).
Result<SandboxRecord> create_local_sandbox(SandboxStore& store, const LocalSandboxSpec& spec);

// SIGTERM to the agent, up to grace (plus a second) for it to exit, SIGKILL,
// then its cgroups and state (the root's upper layer with it) removed. A dead agent is only cleaned up.
// *killed tells whether SIGKILL was needed.
Status terminate_local_sandbox(const SandboxStore& store, const SandboxRecord& record,
                               std::chrono::milliseconds grace, bool* killed = nullptr);

}  // namespace gpubox::host
