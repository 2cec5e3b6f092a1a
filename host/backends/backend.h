// Backend: the one seam between the host's commands (cli/, mcp/, snapshots)
// and a way of running sandboxes (each a folder beside this file). A backend only
// creates, lists, snapshots and ends sandboxes and says what state they are
// in; everything else (exec, files, kernel, jobs, models) goes through the
// agent's RPC endpoint and is the same for every backend. Backends are
// registered once each (registry.h) and hold no state: any thread may call
// them, each call on its own records.
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "host/args.h"
#include "host/resource_limits.h"
#include "host/sandbox_end.h"
#include "host/sandbox_store.h"
#include "rpc/keys.h"
#include "base/status.h"

namespace gpubox::host {

struct Snapshot;  // host/snapshot.h

// Where every sandbox sees its own parts, whatever runs it.
inline constexpr char kSandboxStateDir[] = "/run/gpubox";
inline constexpr char kSandboxWorkDir[] = "/workspace";
// The agent's port inside the sandbox image (image/Dockerfile EXPOSEs it), for
// the backends that run that image (container/, and those of a control plane).
inline constexpr std::uint16_t kImageAgentPort = 7000;

struct BindMount {
  std::string source;  // a host path (absolute)
  std::string target;  // a sandbox path (absolute)
  bool read_only = false;
};

// A new sandbox as `gpubox create` asked for it, the flags every backend
// takes already read and checked; the backend reads its own from flags.
struct CreateRequest {
  const Args* flags = nullptr;     // every flag given (never null once the CLI built the request)
  std::string name;                // "" : none
  std::string agent_path;          // the gpubox-agent binary
  // The agent's whole config document, secrets included: it reaches the agent
  // by no argv and no file the record keeps.
  nlohmann::json agent_config = nlohmann::json::object();
  ResourceLimits limits;           // --cpu, --memory, --pids as given
  std::string network = "none";    // --network as given
  bool user_namespace = false;     // --userns
  bool seccomp_unconfined = false; // --seccomp unconfined
  std::vector<BindMount> mounts;   // --mount, sources resolved
  const Snapshot* from = nullptr;  // --from-snapshot: the snapshot to start from
  // What the record keeps of the request (no secret values); the backend adds its own.
  nlohmann::json public_spec = nlohmann::json::object();
};

// The tag under which a backend with a control plane keeps the budget
// reservation a sandbox's create made (host/budget/), so that reconcile finds
// a sandbox whose create went uncertain (host/sandboxes/reconcile.h).
inline constexpr char kReservationTag[] = "gpubox.reservation";

// How a backend whose sandboxes run elsewhere names its control plane and the
// ids it gives them, for the commands and messages that speak of them.
struct ControlPlane {
  std::string name;         // as messages name it ("Kubernetes")
  std::string id_key;       // the key of its sandbox ids in records' spec, list_remote's rows and outputs
  std::string id_prefix;    // how its sandbox ids begin
  std::string end_command;  // its own CLI's command that ends one of its sandboxes, given the id
  std::string doc;          // the manual's page on it (docs/NAME.md)
};

// A `gpubox create` flag that only some backends take, registered by the
// backend that defines it (Backend::own_flags): create parses it, refuses it
// for the others ("only with --backend ...", host/backends/create_flags.h)
// and its usage names it, with no code outside the backend's folder naming it.
struct BackendFlag {
  std::string name;         // "--publish"
  bool takes_value = true;  // false: a switch
};

// A sandbox running elsewhere, to be recorded in this store (`gpubox adopt`).
struct AdoptRequest {
  std::string remote_id;      // the control plane's id of it (ControlPlane::id_prefix...)
  rpc::KeyPair client_keys;   // the key pair it was created to accept
  std::string server_key;     // its agent's public key
  std::string name;           // "" : none
  std::string app;            // where the control plane groups it (its app)
};

// The GPUs a create asks for, as a budget charges them (host/budget/, docs/budget.md).
struct GpuAsk {
  std::string type;   // as --gpu named it ("" : any of this host's)
  double count = 0;
};

// One line of `gpubox info`: its label ("network:") and its text.
using InfoLine = std::pair<std::string, std::string>;

// What one backend does differently; see the file comment for the threads.
// Where the host reads a sandbox's agent log from; never a place sandbox code
// can write (docs/security.md, "What the host reads").
enum class AgentLogSource {
  host_file,      // a file in the record's host-private directory
  through_agent,  // inside the sandbox, read through the agent's RPC (fs.read): a control plane's sandbox
  engine,         // the container engine's log of PID 1's output: docker
};

class Backend {
 public:
  virtual ~Backend() = default;

  // The name `--backend` takes and records keep (local, podman, docker, ...).
  virtual const std::string& name() const = 0;

  // --- create
  // The flags this backend defines; each is parsed for every backend and refused for those that
  // do not take it. Default: none.
  virtual std::vector<BackendFlag> own_flags() const { return {}; }
  // Other backends' flags this one takes too (its own reading of --image). Default: none.
  virtual std::vector<std::string> borrowed_flags() const { return {}; }
  // Its lines of `gpubox create --help`'s synopsis ("       NAME: [--flag VALUE]...\n"); backends
  // with the same lines are shown once. Default: none.
  virtual std::string create_synopsis() const { return ""; }
  // What its flags, and the common ones where it reads them its own way, mean: lines of
  // `gpubox create --help`, shown once for backends with the same. Default: none.
  virtual std::string create_options_help() const { return ""; }
  // Checks the flags it takes (own and borrowed) and refuses common ones it cannot honour, before
  // anything else of the request is read; invalid_request naming the flag. Other backends' flags
  // are refused after this (refuse_foreign_flags). Default: nothing to check.
  virtual Status check_flags(const Args& flags) const;
  // Checks the rest of the request as this backend must have it (network,
  // --gpu, --userns, mounts, timeouts); invalid_request naming the flag.
  virtual Status check_create(const CreateRequest& request) const = 0;
  // Creates and starts the sandbox of a checked request and waits until its
  // agent is ready. On any failure nothing is left behind.
  virtual Result<SandboxRecord> create(SandboxStore& store, const CreateRequest& request) const = 0;
  // --- what a budget charges a create for (host/budget/)
  // True when this backend's sandboxes cost money at a budget's prices (a paid control plane); false: they run on the
  // user's own machines, and a budget holds their GPU-hours at a price of 0.
  virtual bool priced() const { return false; }
  // The GPUs a checked request asks for. Default: --gpu as the local backend takes it (all, or N[,N...]).
  virtual GpuAsk gpus_asked(const CreateRequest& request) const;
  // How long the sandbox may run, in seconds (0: no limit). Default: the agent's lifecycle.timeout_seconds.
  virtual double timeout_asked(const CreateRequest& request) const;
  // The place the control plane groups this request's sandbox in (its app; "" : none).
  virtual std::string group_asked(const CreateRequest&) const { return ""; }
  // The GPUs a created sandbox's record says it has, as a budget charges a job in a sandbox whose
  // create held none. Default: spec.gpu as TYPE[:N] when given, else the count of spec.gpus.
  virtual GpuAsk gpus_recorded(const SandboxRecord& record) const;
  // Where the control plane groups a created sandbox (its app; "" : none). Default: "".
  virtual std::string group_recorded(const SandboxRecord&) const { return ""; }
  // What to add to the error of a model that failed to load as the sandbox started ("" : nothing).
  virtual std::string model_failure_hint() const { return ""; }

  // --- state and list
  // "creating", "running" or "dead", from what this host knows (no network).
  // Default: the record's agent process on this host (state_of_agent_process).
  virtual std::string state(const SandboxRecord& record) const;
  // True when the state above is what a control plane said last, so that
  // refresh_states is worth a call before trusting "running".
  virtual bool state_is_remote() const { return false; }
  // Its control plane, for a backend whose sandboxes run elsewhere; nullptr: they run on this host.
  virtual const ControlPlane* control_plane() const { return nullptr; }
  // The control plane's id of the record's sandbox, as a budget's reservation is settled against
  // ("" : none, or not known yet). Default: the record's spec[control_plane()->id_key].
  virtual std::string remote_id(const SandboxRecord& record) const;
  // Records the control plane's id of a sandbox whose create never learnt it (reconcile found it by
  // its reservation's tag); the caller saves the record. Default: spec[control_plane()->id_key].
  virtual void link_remote_id(SandboxRecord* record, const std::string& id) const;
  // The reason of an end that only this backend's control plane reports (SandboxEnd::reason; "" : none).
  virtual std::string own_end_reason() const { return ""; }
  // Asks the control plane about these records (others' are skipped) and
  // saves those it reports ended. Default: nothing to ask.
  virtual Status refresh_states(const SandboxStore& store, std::vector<SandboxRecord*> records) const;
  // How a dead sandbox ended. Default: the agent's exit record on this host (sandbox_end.h).
  virtual SandboxEnd end(const SandboxRecord& record) const { return sandbox_end_on_host(record); }
  // The sandboxes the control plane runs under app that gpubox started
  // ({"sandboxes": [{ID_KEY, "gpubox_id", "tags"}]}, ID_KEY its control_plane()->id_key). Default: invalid_request.
  virtual Result<nlohmann::json> list_remote(const std::string& app) const;

  // --- snapshot
  // Takes the snapshot: sets snapshot->kind and what that kind keeps (an
  // image, or archives under snapshot->dir), and its size.
  virtual Status take_snapshot(const SandboxStore& store, const SandboxRecord& record, Snapshot* snapshot) const = 0;
  // Removes what a snapshot of this backend keeps outside its dir (a committed image). Default: nothing.
  virtual Status remove_snapshot(const Snapshot& snapshot) const;
  // The keys of this backend's records' spec that name the running sandbox (its container, relay,
  // remote id, limit plan) and so a snapshot must not carry. Default: none.
  virtual std::vector<std::string> unsnapshotted_spec_keys() const { return {}; }
  // Puts what the snapshot keeps outside an image into the new sandbox created from it (a work dir
  // archive). Default: nothing (its image holds its files).
  virtual Status restore_snapshot_files(const Snapshot&, const SandboxRecord&) const { return Status::ok(); }
  // What a snapshot of this backend holds, as `gpubox snapshot` says it. Default: its image.
  virtual std::string snapshot_contents(const Snapshot& snapshot) const;
  // Whether a sandbox restored from the snapshot has the packages installed in the old one. Default: true.
  virtual bool snapshot_keeps_packages(const Snapshot&) const { return true; }
  // Appends this backend's own `gpubox create` flags that recreate a snapshot's sandbox (its image,
  // its control plane's settings) to the common ones. Default: none.
  virtual void add_snapshot_create_args(const Snapshot&, std::vector<std::string>* /*args*/) const {}

  // --- terminate
  // Stops the sandbox (its agent first, gracefully, for up to about grace),
  // and removes its state and record. *killed: it had to be killed. A sandbox
  // already gone is only cleaned up.
  virtual Status terminate(const SandboxStore& store, const SandboxRecord& record, std::chrono::milliseconds grace,
                           bool* killed) const = 0;

  // --- logs
  // Where `gpubox logs` reads the agent's log. Default: a file of this host
  // (record.agent_files_dir()/agent.log).
  virtual AgentLogSource agent_log_source(const SandboxRecord&) const { return AgentLogSource::host_file; }
  // REQUIRES: agent_log_source(record) == engine. The engine's command that
  // prints the container's log (following it when follow): program, then arguments.
  virtual std::vector<std::string> engine_log_command(const SandboxRecord&, bool /*follow*/) const { return {}; }

  // --- adopt
  // Records a running sandbox created elsewhere. Default: invalid_request.
  virtual Result<SandboxRecord> adopt(SandboxStore& store, const AdoptRequest& request) const;

  // --- what `gpubox info`, `gpubox usage` and hints say of a sandbox
  // The lines `info` prints between its endpoint and its limits (where it runs, isolation, seccomp);
  // info is `info --json`'s document (isolation, as the agent reported it).
  virtual std::vector<InfoLine> describe(const SandboxRecord& record, const nlohmann::json& info) const = 0;
  // Adds what only this backend was asked for to `usage`'s requested resources.
  virtual void add_requested(const SandboxRecord& record, nlohmann::json* requested) const = 0;
  // Why a download from inside the sandbox may have failed for its network ("" : no reason to think so).
  virtual std::string network_hint(const SandboxRecord&) const { return ""; }
};

// The state of a sandbox whose agent is a process of this host: creating
// before it started, running while it lives, dead after.
std::string state_of_agent_process(const SandboxRecord& record);

// For the backends whose sandboxes run elsewhere: asks the record's agent to shut down
// (sys.shutdown: jobs staged, outputs persisted) before the control plane ends the sandbox;
// whether it said yes.
bool ask_agent_to_shut_down(const SandboxRecord& record);

// The end of a sandbox that its control plane reported ({exit_code, reason}, spec.NAME_ended):
// reason, "WHO ended it: ITS REASON" and the exit code when it gave one.
SandboxEnd end_reported(const std::string& reason, const std::string& who, const nlohmann::json& ended);

// The path of the gpubox-agent binary: $GPUBOX_AGENT, else beside this executable.
std::string default_agent_path();

}  // namespace gpubox::host
