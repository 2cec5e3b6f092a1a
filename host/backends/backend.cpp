#include "host/backends/backend.h"

#include <unistd.h>

#include <cstdlib>

#include "host/backends/registry.h"

namespace gpubox::host {

std::string Backend::state(const SandboxRecord& record) const { return state_of_agent_process(record); }

Status Backend::refresh_states(const SandboxStore&, std::vector<SandboxRecord*>) const { return Status::ok(); }

Result<nlohmann::json> Backend::list_remote(const std::string&) const {
  return Status(ErrorCode::invalid_request, "--backend " + name() + " runs nothing remote to list");
}

Status Backend::remove_snapshot(const Snapshot&) const { return Status::ok(); }

Result<SandboxRecord> Backend::adopt(SandboxStore&, const AdoptRequest&) const {
  return Status(ErrorCode::invalid_request, "--backend " + name() + " cannot adopt a sandbox created elsewhere");
}

Status refuse_flags(const Args& flags, const std::vector<std::string>& names, const std::string& why) {
  for (const auto& name : names) {
    if (!flags.all(name).empty() || flags.flag(name)) return Status(ErrorCode::invalid_request, name + ": " + why);
  }
  return Status::ok();
}

std::string state_of_agent_process(const SandboxRecord& record) {
  if (record.agent.pid <= 0) return "creating";
  return process_alive(record.agent) ? "running" : "dead";
}

Status terminate_sandbox(const SandboxStore& store, const SandboxRecord& record, std::chrono::milliseconds grace,
                         bool* killed) {
  auto backend = backend_of(record);
  if (!backend) return backend.status();
  return (*backend)->terminate(store, record, grace, killed);
}

std::string default_agent_path() {
  if (const char* given = std::getenv("GPUBOX_AGENT"); given && *given) return given;
  char self[4096];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return "gpubox-agent";
  std::string path(self, static_cast<size_t>(n));
  return path.substr(0, path.rfind('/') + 1) + "gpubox-agent";
}

}  // namespace gpubox::host
