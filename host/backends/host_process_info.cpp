#include "host/backends/host_process_info.h"

namespace gpubox::host {
namespace {

std::string info_text_of(const nlohmann::json& value) { return value.is_string() ? value.get<std::string>() : value.dump(); }

}  // namespace

std::vector<InfoLine> describe_host_process(const SandboxRecord& record) {
  const auto& spec = record.spec;
  std::vector<InfoLine> lines = {{"agent pid:", std::to_string(record.agent.pid) + " (host)"},
                                 {"network:", spec.value("network", "none")}};
  if (spec.contains("image")) {
    lines.push_back({"image:", info_text_of(spec["image"]) + " (" + record.backend + " container " +
                                   info_text_of(spec.value("container", nlohmann::json(""))) + ")"});
  }
  return lines;
}

void add_requested_on_host(const SandboxRecord& record, nlohmann::json* requested) {
  const auto& spec = record.spec;
  (*requested)["pids"] = spec.value("pids", 0ULL) ? nlohmann::json(spec.value("pids", 0ULL)) : nlohmann::json();
  (*requested)["idle_timeout_s"] =
      spec.value("idle_timeout_s", 0.0) > 0 ? nlohmann::json(spec.value("idle_timeout_s", 0.0)) : nlohmann::json();
  // local: host GPU indices; podman/docker: the --gpu text given to the engine.
  (*requested)["gpus"] = spec.contains("gpu") ? spec["gpu"] : spec.value("gpus", nlohmann::json::array());
}

InfoLine seccomp_line(const SandboxRecord& record, const std::string& default_text) {
  if (record.spec.value("seccomp", "default") == "unconfined") {
    return {"seccomp:", "unconfined -- WARNING: no syscall filter (created with --seccomp unconfined)"};
  }
  return {"seccomp:", default_text};
}

}  // namespace gpubox::host
