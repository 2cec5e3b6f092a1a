#include "host/mcp/sandboxes.h"

#include "host/sandbox_keys.h"
#include "host/sandboxes/state.h"

namespace gpubox::mcp {

Lease::~Lease() {
  if (owner_ && client_) owner_->give_back(sandbox_id_, std::move(client_));
}

Result<host::SandboxRecord> Sandboxes::resolve_name(const std::string& id_or_name) {
  auto store = host::SandboxStore::open_default();
  if (!store) return store.status();
  auto record = store->resolve(id_or_name);
  if (!record) return Status(record.status().code(), record.status().message() + " (list_sandboxes lists them)");
  return record;
}

Result<host::SandboxRecord> Sandboxes::resolve(const nlohmann::json& arguments) {
  if (auto id = arguments.find("sandbox_id"); id != arguments.end() && id->is_string()) return resolve_name(id->get<std::string>());
  if (auto session = arguments.find("session_id"); session != arguments.end() && session->is_string()) {
    if (auto bound = session_sandbox(session->get<std::string>())) return resolve_name(*bound);
    if (default_) return resolve_name(*default_);
    return Status(ErrorCode::invalid_request, "session_id '" + session->get<std::string>() +
                                                  "' is not bound to a sandbox yet: give sandbox_id too (its first execute_code binds it)");
  }
  if (default_) return resolve_name(*default_);
  return Status(ErrorCode::invalid_request,
                "sandbox_id: required (a sandbox id or name; create_sandbox makes one, list_sandboxes lists them; "
                "`gpubox mcp --sandbox X` sets a default)");
}

Result<Lease> Sandboxes::connect(const host::SandboxRecord& record) {
  std::string state = sandbox_state(record);
  if (state != "running") return Status(ErrorCode::unavailable, "sandbox " + record.id + " is " + state);
  {
    MutexLock lock(mutex_);
    auto& idle = idle_[record.id];
    if (!idle.empty()) {
      auto client = std::move(idle.back());
      idle.pop_back();
      return Lease(this, record.id, std::move(client));
    }
  }
  auto options = host::client_options_for(record);
  if (!options) return options.status();
  options->connect_timeout = std::chrono::milliseconds(5'000);
  auto client = rpc::Client::connect(*options);
  if (!client) return Status(ErrorCode::unavailable, "sandbox " + record.id + " does not answer: " + client.status().message());
  return Lease(this, record.id, std::move(*client));
}

void Sandboxes::give_back(const std::string& sandbox_id, std::unique_ptr<rpc::Client> client) {
  MutexLock lock(mutex_);
  auto& idle = idle_[sandbox_id];
  if (idle.size() < 8) idle.push_back(std::move(client));
}

std::optional<std::string> Sandboxes::session_sandbox(const std::string& session_id) {
  MutexLock lock(mutex_);
  auto found = sessions_.find(session_id);
  if (found == sessions_.end()) return std::nullopt;
  return found->second;
}

void Sandboxes::bind_session(const std::string& session_id, const std::string& sandbox_id) {
  MutexLock lock(mutex_);
  sessions_[session_id] = sandbox_id;
}

void Sandboxes::forget(const std::string& sandbox_id) {
  MutexLock lock(mutex_);
  idle_.erase(sandbox_id);
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    it = it->second == sandbox_id ? sessions_.erase(it) : std::next(it);
  }
}

}  // namespace gpubox::mcp
