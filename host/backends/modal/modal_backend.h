// The Modal backend: a sandbox is a Modal Sandbox whose PID 1 is the static
// agent, reached through one raw TCP tunnel secured by CURVE. The Modal steps
// (create, terminate, state, remote list) run in Python through Modal's own
// SDK: `PYTHON -m gpubox.modal_backend CMD` (python/gpubox/modal_backend.py,
// run as host/backends/python_module.h says). Everything after
// create goes through the agent's RPC port, as for every backend. One
// thread; forks.
#pragma once

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "host/args.h"
#include "host/backends/backend.h"
#include "host/sandbox_store.h"
#include "rpc/keys.h"
#include "base/status.h"

namespace gpubox::host {

// The backend's name, as records keep it (modal.h registers it).
inline constexpr char kModalBackend[] = "modal";

struct ModalVolume {
  std::string name;  // a Modal Volume, created when missing
  std::string path;  // where it is mounted in the sandbox
};

struct ModalSandboxSpec {
  std::string app = "gpubox";
  std::string image;  // a registry image; "": the module's CUDA + PyTorch default
  std::string from_snapshot;  // a Modal image id from `gpubox snapshot` (instead of image)
  std::string agent_path;     // the static agent the SDK adds to the image
  std::string gpu;            // Modal's form: H100, A100-80GB:2, ...; "": no GPU
  std::string region;         // one or several, comma-separated
  double cpu = 0;             // 0: Modal's default
  std::uint64_t memory_mib = 0;
  double timeout_s = 3600;    // Modal's container timeout, also the agent's lifecycle.timeout_seconds
  std::vector<ModalVolume> volumes;
  std::vector<std::string> modal_secrets;  // names of Modal Secrets, their keys become env
  std::string network = "none";            // none, allow (cidrs) or open
  std::vector<std::string> cidrs;
  std::map<std::string, std::string> tags;
  std::string name;
  nlohmann::json agent_config = nlohmann::json::object();  // secrets included; travels as a Modal Secret
  std::chrono::milliseconds ready_timeout{120'000};
  nlohmann::json public_spec = nlohmann::json::object();
};

// The Modal flags of `gpubox create` (--app, --image, --gpu, --region, --volume, --modal-secret, --tag,
// --network, --ready-timeout) into *spec; invalid_request naming the flag, also for one given without modal.
Status parse_modal_flags(const Args& args, bool modal, ModalSandboxSpec* spec);

// The agent's state dir in the Modal sandbox of gpubox id `id` (spec.state_dir): /run/gpubox/ID.
std::string modal_state_dir(const std::string& id);

// Runs `PYTHON -m gpubox.modal_backend COMMAND` with request on stdin; its
// JSON result, or its error (invalid_request for a usage error such as no
// `modal` package or no token, unavailable/internal otherwise).
Result<nlohmann::json> modal_call(const std::string& command, const nlohmann::json& request,
                                  std::chrono::milliseconds timeout = std::chrono::seconds(300));

// Starts the sandbox and returns once its agent answered sys.ping through the
// tunnel. On any failure nothing is left: the module terminates what it
// started and the store's record is removed.
Result<SandboxRecord> create_modal_sandbox(SandboxStore& store, const ModalSandboxSpec& spec);

// Asks the agent to shut down (jobs staged, outputs persisted), waits up to
// grace plus a margin for the sandbox to end, then terminates it on Modal
// and removes the record. *killed: Modal had to terminate it.
Status terminate_modal_sandbox(const SandboxStore& store, const SandboxRecord& record,
                               std::chrono::milliseconds grace, bool* killed = nullptr);

// Records a running Modal sandbox created elsewhere (or before a host
// restart) under a new gpubox id, once its agent answers with these keys:
// the client's key pair and the agent's public key.
Result<SandboxRecord> adopt_modal_sandbox(SandboxStore& store, const std::string& modal_id, const rpc::KeyPair& client_keys,
                                          const std::string& server_key, const std::string& name, const std::string& app);

// What refresh_modal_states saved last (spec.modal_ended: dead); running once
// Modal gave the sandbox an id, creating before.
std::string modal_state(const SandboxRecord& record);

// Asks Modal about the running records among these; records it reports
// ended get spec.modal_ended ({exit_code, reason}) saved, so that their
// state is "dead". An unreachable Modal leaves the records as they were.
Status refresh_modal_states(const SandboxStore& store, std::vector<SandboxRecord*> records);

}  // namespace gpubox::host
