#include "host/backends/backend.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "host/sandbox_keys.h"
#include "host/snapshot.h"
#include "rpc/client.h"


namespace gpubox::host {

Status Backend::check_flags(const Args&) const { return Status::ok(); }

std::string Backend::state(const SandboxRecord& record) const { return state_of_agent_process(record); }

Status Backend::refresh_states(const SandboxStore&, std::vector<SandboxRecord*>) const { return Status::ok(); }

Result<nlohmann::json> Backend::list_remote(const std::string&) const {
  return Status(ErrorCode::invalid_request, "--backend " + name() + " runs nothing remote to list");
}

std::string Backend::remote_id(const SandboxRecord& record) const {
  const ControlPlane* plane = control_plane();
  if (!plane) return "";
  auto id = record.spec.find(plane->id_key);
  return id != record.spec.end() && id->is_string() ? id->get<std::string>() : "";
}

void Backend::link_remote_id(SandboxRecord* record, const std::string& id) const {
  if (const ControlPlane* plane = control_plane()) record->spec[plane->id_key] = id;
}

std::string Backend::snapshot_contents(const Snapshot& snapshot) const { return snapshot.image; }

Status Backend::remove_snapshot(const Snapshot&) const { return Status::ok(); }

Result<SandboxRecord> Backend::adopt(SandboxStore&, const AdoptRequest&) const {
  return Status(ErrorCode::invalid_request, "--backend " + name() + " cannot adopt a sandbox created elsewhere");
}

namespace {

// The host's GPUs: /dev/nvidiaN.
double host_gpu_count() {
  double count = 0;
  if (DIR* dir = ::opendir("/dev")) {
    while (dirent* entry = ::readdir(dir)) {
      const char* name = entry->d_name;
      if (std::strncmp(name, "nvidia", 6) == 0 && name[6] >= '0' && name[6] <= '9') ++count;
    }
    ::closedir(dir);
  }
  return count;
}

}  // namespace

GpuAsk Backend::gpus_asked(const CreateRequest& request) const {
  auto gpu = request.flags ? request.flags->last("--gpu") : std::nullopt;
  if (!gpu || gpu->empty()) return {};
  if (*gpu == "all") return {"", host_gpu_count()};
  return {"", static_cast<double>(std::count(gpu->begin(), gpu->end(), ',') + 1)};
}

GpuAsk Backend::gpus_recorded(const SandboxRecord& record) const {
  const nlohmann::json& spec = record.spec;
  std::string gpu = spec.value("gpu", nlohmann::json("")).is_string() ? spec.value("gpu", "") : "";
  if (!gpu.empty()) {
    auto colon = gpu.find(':');
    return {gpu.substr(0, colon), colon == std::string::npos ? 1.0 : std::max(1, std::atoi(gpu.c_str() + colon + 1))};
  }
  if (spec.contains("gpus") && spec["gpus"].is_array()) return {"", static_cast<double>(spec["gpus"].size())};
  return {};
}

double Backend::timeout_asked(const CreateRequest& request) const {
  const nlohmann::json& config = request.agent_config;
  if (!config.contains("lifecycle") || !config["lifecycle"].is_object()) return 0;
  const auto& value = config["lifecycle"].value("timeout_seconds", nlohmann::json(0.0));
  return value.is_number() ? value.get<double>() : 0;
}

std::string state_of_agent_process(const SandboxRecord& record) {
  if (record.agent.pid <= 0) return "creating";
  return process_alive(record.agent) ? "running" : "dead";
}

std::string default_agent_path() {
  if (const char* given = std::getenv("GPUBOX_AGENT"); given && *given) return given;
  char self[4096];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return "gpubox-agent";
  std::string path(self, static_cast<size_t>(n));
  return path.substr(0, path.rfind('/') + 1) + "gpubox-agent";
}

bool ask_agent_to_shut_down(const SandboxRecord& record) {
  auto options = client_options_for(record);
  if (!options) return false;
  options->connect_timeout = std::chrono::milliseconds(5'000);
  auto client = rpc::Client::connect(*options);
  return client && static_cast<bool>((*client)->call("sys.shutdown"));
}

SandboxEnd end_reported(const std::string& reason, const std::string& who, const nlohmann::json& ended) {
  SandboxEnd how{reason, who + " ended it: " + ended.value("reason", std::string("no reason given")), std::nullopt};
  if (ended.value("exit_code", nlohmann::json()).is_number_integer()) how.exit_code = ended["exit_code"].get<int>();
  return how;
}

}  // namespace gpubox::host
