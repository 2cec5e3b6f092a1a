// SandboxStore: the host's record of the sandboxes it created, one directory
// per sandbox under $XDG_STATE_HOME/gpubox/sandboxes (fallback
// ~/.local/state/gpubox), each holding sandbox.json (mode 0600; never a secret
// value), the agent's state dir `agent/`, the work dir `work/` and, for a
// local sandbox, `host/`: the agent's files the host reads. Several CLI processes may use one store at once: creation takes
// an exclusive lock on STORE/lock. One object per thread.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "host/process_identity.h"
#include "base/status.h"

namespace gpubox::host {

// What the host remembers of one sandbox: a plain value, read and written by
// the store. Its state ("creating", "running", "dead") is not its own to
// tell: its backend says it (host/sandboxes/state.h).
struct SandboxRecord {
  std::string id;       // 12 lower-case hex digits
  std::string name;     // optional, unique in the store
  std::string backend = "local";
  std::string dir;      // STORE/sandboxes/ID
  std::string endpoint; // ipc://DIR/host/rpc.sock (local), tcp://… (others)
  ProcessIdentity agent;  // the agent's pid in the host's PID namespace, and its start time
  double created_at = 0;  // seconds since the epoch
  // Everything else create decided (limits and how they are enforced,
  // network, timeouts, env and secret *names*, mounts, cgroup paths).
  nlohmann::json spec = nlohmann::json::object();

  std::string agent_dir() const { return dir + "/agent"; }
  // The agent's RPC socket, log (agent.log), exit record (exit.json) and
  // stderr (agent.stderr) where sandbox code can write none of them: never
  // mounted in the sandbox, its agent reaches it through a descriptor
  // (local backend, spec.agent_files_private; docs/security.md).
  std::string host_dir() const { return dir + "/host"; }
  // Where the host reads the agent's log and exit record: host_dir() when the
  // agent writes them there, else agent_dir() (shared with the sandbox: read
  // with read_agent_file's care, host/agent_files.h).
  std::string agent_files_dir() const { return spec.value("agent_files_private", false) ? host_dir() : agent_dir(); }
  std::string work_dir() const { return dir + "/work"; }
  nlohmann::json to_json() const;
  static Result<SandboxRecord> from_json(const nlohmann::json& json);
};

class SandboxStore {
 public:
  // The store named by $XDG_STATE_HOME or $HOME; created (mode 0700) on first use.
  static Result<SandboxStore> open_default();
  explicit SandboxStore(std::string root) : root_(std::move(root)) {}

  const std::string& root() const { return root_; }

  // Reserves a fresh id (and name, when given) and creates its directory with
  // a "creating" record. already_exists when the name is taken;
  // invalid_request when it is malformed.
  Result<SandboxRecord> reserve(const std::string& name, const nlohmann::json& spec);
  // Writes the record atomically (temp file + rename, mode 0600).
  Status save(const SandboxRecord& record) const;
  // Removes the sandbox's directory and everything in it.
  Status remove(const SandboxRecord& record) const;

  // Every record, oldest first; unreadable ones are skipped.
  std::vector<SandboxRecord> list() const;
  // By exact id, exact name, or a unique id prefix. not_found names what was given.
  Result<SandboxRecord> resolve(const std::string& id_or_name) const;

 private:
  std::string sandboxes_dir() const { return root_ + "/sandboxes"; }
  std::string root_;
};

// Names: 1–63 of [A-Za-z0-9_.-], starting with a letter or digit.
bool valid_sandbox_name(const std::string& name);

}  // namespace gpubox::host
