#include "host/backends/local/local.h"

#include "host/backends/host_process_info.h"
#include "host/backends/local/local_backend.h"
#include "host/backends/local/local_snapshot.h"

namespace gpubox::host {
namespace {

std::string text_of(const nlohmann::json& value) { return value.is_string() ? value.get<std::string>() : value.dump(); }

std::string joined(const nlohmann::json& list) {
  std::string text;
  for (const auto& item : list) text += (text.empty() ? "" : ", ") + text_of(item);
  return text;
}

// Which protections the sandbox has (local_backend.h), as its agent reported them.
void add_isolation(const nlohmann::json& isolation, std::vector<InfoLine>* lines) {
  if (!isolation.is_object()) {
    lines->push_back({"isolation:", "unknown (created by an older gpubox)"});
    return;
  }
  lines->push_back({"root:", isolation.value("root", "host") + " (copy-on-write of the host's /; hidden: " +
                                 joined(isolation.value("hidden", nlohmann::json::array())) + ")"});
  lines->push_back({"caps:", joined(isolation.value("capabilities", nlohmann::json::array())) +
                                 (isolation.value("no_new_privs", false) ? "; no_new_privs" : "")});
  const auto& userns = isolation.value("user_namespace", nlohmann::json(nullptr));
  lines->push_back({"userns:", userns.is_object() ? "uid map " + userns.value("uid_map", "?") + ", gid map " + userns.value("gid_map", "?")
                                                  : "none (root inside is the host's uid 0, without its capabilities)"});
  auto gpus = isolation.value("gpus", nlohmann::json::array());
  lines->push_back({"gpus:", gpus.empty() ? "none" : joined(gpus)});
}

// --gpu as this host's GPUs (none: no GPU).
Result<GpuPlan> gpus_of(const CreateRequest& request) {
  auto gpu = request.flags->last("--gpu");
  return gpu ? plan_gpus(*gpu) : Result<GpuPlan>(GpuPlan{});
}

// A sandbox in namespaces of this host, its agent a child of none of ours (local_backend.h).
class LocalBackend final : public Backend {
 public:
  const std::string& name() const override { return name_; }

  std::string create_synopsis() const override { return "       local:         [--userns]\n"; }

  std::string create_options_help() const override {
    return "  --network   local: none (loopback only, default) or host\n"
           "  --gpu       local: all or GPU numbers N[,N...] (the host's /dev/nvidia* and driver files bound in)\n"
           "  --seccomp   local: default (gpubox's syscall filter, Docker's default profile; docs/security.md) or\n"
           "              unconfined (none; info warns)\n"
           "  --userns    root inside maps to an unprivileged uid range of the host (idmapped mounts)\n";
  }

  Status check_create(const CreateRequest& request) const override {
    if (request.network != "none" && request.network != "host") {
      return Status(ErrorCode::invalid_request, "--network: expected none or host, got '" + request.network + "'");
    }
    auto gpus = gpus_of(request);
    return gpus ? Status::ok() : Status(ErrorCode::invalid_request, gpus.status().message());
  }

  Result<SandboxRecord> create(SandboxStore& store, const CreateRequest& request) const override {
    LocalSandboxSpec spec;
    spec.name = request.name;
    spec.agent_path = request.agent_path;
    spec.agent_config = request.agent_config;
    spec.limits = request.limits;
    spec.network_none = request.network == "none";
    spec.user_namespace = request.user_namespace;
    spec.seccomp_unconfined = request.seccomp_unconfined;
    spec.mounts = request.mounts;
    spec.public_spec = request.public_spec;
    auto gpus = gpus_of(request);
    if (!gpus) return gpus.status();
    spec.gpus = std::move(*gpus);
    // The GPUs' variables, unless --env set them; the record names them with the others.
    nlohmann::json& pub = spec.public_spec;
    for (const auto& [variable, value] : spec.gpus.env) {
      if (!spec.agent_config["env"].contains(variable)) spec.agent_config["env"][variable] = pub["agent_config"]["env"][variable] = value;
    }
    pub["env"] = nlohmann::json::array();
    for (const auto& [variable, value] : spec.agent_config["env"].items()) pub["env"].push_back(variable);
    pub["gpus"] = spec.gpus.indices;
    if (const Snapshot* from = request.from; from && from->has_layer()) {
      // The root's upper layer goes in place before the overlay is mounted; the work dir follows once the sandbox runs.
      spec.seed_upper = [from](const std::string& upper, const harvest::LayerIds& ids) {
        Status restored = restore_snapshot_layer(*from, upper, ids);
        return restored ? restored : Status(restored.code(), "--from-snapshot " + from->name + ": " + restored.message());
      };
    }
    return create_local_sandbox(store, spec);
  }

  std::string model_failure_hint() const override {
    return " (a host path the sandbox does not see must be mounted: --mount HOST:SANDBOX[:ro])";
  }

  std::vector<std::string> unsnapshotted_spec_keys() const override {
    return {"limit_plan", "limits_enforced_by", "root_mount_points"};
  }

  Status restore_snapshot_files(const Snapshot& snapshot, const SandboxRecord& record) const override {
    return restore_work_dir(snapshot, record);
  }

  std::string snapshot_contents(const Snapshot& snapshot) const override {
    return snapshot.has_layer() ? "work dir and root layer archives" : "work dir archive";
  }

  // Snapshots from before the root's layer was kept hold the work dir alone.
  bool snapshot_keeps_packages(const Snapshot& snapshot) const override { return snapshot.has_layer(); }

  Status take_snapshot(const SandboxStore& store, const SandboxRecord& record, Snapshot* snapshot) const override {
    return snapshot_local_sandbox(store, record, *snapshot);
  }

  Status terminate(const SandboxStore& store, const SandboxRecord& record, std::chrono::milliseconds grace,
                   bool* killed) const override {
    return terminate_local_sandbox(store, record, grace, killed);
  }

  std::vector<InfoLine> describe(const SandboxRecord& record, const nlohmann::json& info) const override {
    std::vector<InfoLine> lines = describe_host_process(record);
    add_isolation(info.value("isolation", nlohmann::json()), &lines);
    lines.push_back(seccomp_line(record, "default (gpubox's filter: Docker's default profile; docs/security.md)"));
    return lines;
  }

  void add_requested(const SandboxRecord& record, nlohmann::json* requested) const override {
    add_requested_on_host(record, requested);
  }

 private:
  const std::string name_ = "local";
};

}  // namespace

const Backend& local_backend() {
  static const LocalBackend backend;
  return backend;
}

}  // namespace gpubox::host
