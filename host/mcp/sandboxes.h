// Which sandbox a tool call is about, and connections to it. A call names
// `sandbox_id` (an id, a unique prefix or a name), or `session_id` (a
// notebook session, bound to its sandbox by its first execute_code), or
// neither when `gpubox mcp --sandbox X` set a default. Connections are
// pooled per sandbox: each call leases one (an rpc::Client belongs to one
// thread at a time) and gives it back. Any thread.
#pragma once

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/thread_annotations.h"
#include "host/sandbox_store.h"
#include "rpc/client.h"

namespace gpubox::mcp {

class Sandboxes;

// A client leased from the pool; back to it when the lease ends, unless discarded.
class Lease {
 public:
  Lease(Sandboxes* owner, std::string sandbox_id, std::unique_ptr<rpc::Client> client)
      : owner_(owner), sandbox_id_(std::move(sandbox_id)), client_(std::move(client)) {}
  Lease(Lease&&) = default;
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  ~Lease();

  rpc::Client& operator*() { return *client_; }
  rpc::Client* operator->() { return client_.get(); }
  // The connection is in an unknown state (a request left unanswered): close it.
  void discard() { client_.reset(); }

 private:
  Sandboxes* owner_;
  std::string sandbox_id_;
  std::unique_ptr<rpc::Client> client_;
};

class Sandboxes {
 public:
  explicit Sandboxes(std::optional<std::string> default_sandbox) : default_(std::move(default_sandbox)) {}

  // The record the arguments name (sandbox_id, else session_id's sandbox,
  // else the default); invalid_request naming the argument, not_found, ….
  Result<host::SandboxRecord> resolve(const nlohmann::json& arguments);
  Result<host::SandboxRecord> resolve_name(const std::string& id_or_name);
  Result<Lease> connect(const host::SandboxRecord& record) EXCLUDES(mutex_);

  // Sessions: the session's sandbox id once bound.
  std::optional<std::string> session_sandbox(const std::string& session_id) EXCLUDES(mutex_);
  void bind_session(const std::string& session_id, const std::string& sandbox_id) EXCLUDES(mutex_);
  // A terminated sandbox: its pooled connections closed, its sessions unbound.
  void forget(const std::string& sandbox_id) EXCLUDES(mutex_);

 private:
  friend class Lease;
  void give_back(const std::string& sandbox_id, std::unique_ptr<rpc::Client> client) EXCLUDES(mutex_);

  std::optional<std::string> default_;
  Mutex mutex_;
  std::map<std::string, std::vector<std::unique_ptr<rpc::Client>>> idle_ GUARDED_BY(mutex_);
  std::map<std::string, std::string> sessions_ GUARDED_BY(mutex_);
};

}  // namespace gpubox::mcp
