#include "host/backends/modal/modal.h"

#include <cstdlib>

#include "host/backends/modal/modal_backend.h"
#include "host/snapshot.h"

namespace gpubox::host {
namespace {

std::string string_or_dump(const nlohmann::json& value) { return value.is_string() ? value.get<std::string>() : value.dump(); }

// Modal's "H100:2" as {"type": "H100", "count": 2}; null for none.
nlohmann::json modal_gpu(const std::string& gpu) {
  if (gpu.empty()) return nullptr;
  auto colon = gpu.find(':');
  int count = colon == std::string::npos ? 1 : std::atoi(gpu.c_str() + colon + 1);
  return {{"type", gpu.substr(0, colon)}, {"count", count}};
}

// --timeout is Modal's container timeout and the agent's own deadline (3600 s unless given).
double timeout_of(const CreateRequest& request) {
  const nlohmann::json& config = request.agent_config;
  return config.contains("lifecycle") ? config["lifecycle"].value("timeout_seconds", 3600.0) : 3600.0;
}

// A sandbox on Modal: no process of this host; its state is what Modal said last.
class ModalBackend final : public Backend {
 public:
  const std::string& name() const override { return name_; }

  std::vector<BackendFlag> own_flags() const override {
    return {{"--app"}, {"--region"}, {"--volume"}, {"--modal-secret"}, {"--tag"}};
  }

  std::vector<std::string> borrowed_flags() const override { return {"--image", "--ready-timeout"}; }

  std::string create_synopsis() const override {
    return "       modal:         [--app NAME] [--image REF] [--gpu TYPE[:N]] [--region R[,R...]] [--volume NAME:/path]...\n"
           "                      [--modal-secret NAME]... [--tag K=V]... [--network none|open|allow:CIDR,...] [--ready-timeout S]\n"
           "                      (no --mount, --publish, --pids; docs/modal.md)\n";
  }

  Status check_flags(const Args& flags) const override {
    ModalSandboxSpec spec;
    return parse_modal_flags(flags, true, &spec);
  }

  Status check_create(const CreateRequest& request) const override {
    if (request.flags->last("--seccomp")) {
      return Status(ErrorCode::invalid_request, "--seccomp: not with --backend modal (gVisor filters every Modal sandbox's system calls)");
    }
    double timeout_s = timeout_of(request);
    if (timeout_s < 1 || timeout_s > 86400) return Status(ErrorCode::invalid_request, "--timeout: Modal allows 1 to 86400 seconds");
    return Status::ok();
  }

  bool priced() const override { return true; }

  // --gpu TYPE[:N].
  GpuAsk gpus_asked(const CreateRequest& request) const override {
    ModalSandboxSpec cloud;
    if (!parse_modal_flags(*request.flags, true, &cloud) || cloud.gpu.empty()) return {};
    nlohmann::json gpu = modal_gpu(cloud.gpu);
    return {gpu.value("type", ""), static_cast<double>(gpu.value("count", 1))};
  }

  double timeout_asked(const CreateRequest& request) const override { return timeout_of(request); }

  std::string group_recorded(const SandboxRecord& record) const override { return record.spec.value("app", ""); }

  std::string group_asked(const CreateRequest& request) const override {
    ModalSandboxSpec cloud;
    (void)parse_modal_flags(*request.flags, true, &cloud);
    return cloud.app;
  }

  Result<SandboxRecord> create(SandboxStore& store, const CreateRequest& request) const override {
    ModalSandboxSpec cloud;
    if (Status flags = parse_modal_flags(*request.flags, true, &cloud); !flags) return flags;
    cloud.timeout_s = timeout_of(request);
    nlohmann::json pub = request.public_spec;
    pub.erase("seccomp");  // gVisor's, not one of ours
    pub["pids"] = 0;       // Modal sets no pids limit
    pub["timeout_s"] = cloud.timeout_s;
    pub["gpu"] = cloud.gpu;
    pub["region"] = cloud.region;
    pub["volumes"] = nlohmann::json::array();
    for (const auto& volume : cloud.volumes) pub["volumes"].push_back(volume.name + ":" + volume.path);
    pub["modal_secrets"] = cloud.modal_secrets;
    pub["tags"] = cloud.tags;  // the user's: a snapshot's restore passes them to --tag again
    // Reconcile finds a sandbox whose create went uncertain by this tag (gpubox budget reconcile).
    if (request.public_spec.contains("budget")) {
      cloud.tags[kReservationTag] = request.public_spec["budget"].value("reservation", "");
    }
    cloud.name = request.name;
    cloud.agent_path = request.agent_path;
    cloud.cpu = request.limits.cpus;
    cloud.memory_mib = request.limits.memory_mib;
    cloud.agent_config = request.agent_config;
    cloud.public_spec = std::move(pub);
    if (request.from) cloud.from_snapshot = request.from->image;  // its files; the agent is added to it again
    return create_modal_sandbox(store, cloud);
  }

  // What refresh_states saved last (spec.modal_ended); running once Modal gave it an id.
  std::string state(const SandboxRecord& record) const override { return modal_state(record); }

  bool state_is_remote() const override { return true; }

  const ControlPlane* control_plane() const override { return &plane_; }

  // Its id is kept twice: spec.modal_id, and in spec.modal beside the tunnel.
  void link_remote_id(SandboxRecord* record, const std::string& id) const override {
    record->spec["modal_id"] = id;
    record->spec["modal"]["modal_id"] = id;
  }

  std::string own_end_reason() const override { return "ended_on_modal"; }

  Status refresh_states(const SandboxStore& store, std::vector<SandboxRecord*> records) const override {
    return refresh_modal_states(store, std::move(records));
  }

  SandboxEnd end(const SandboxRecord& record) const override {
    return end_reported(own_end_reason(), "Modal", record.spec.value("modal_ended", nlohmann::json::object()));
  }

  Result<nlohmann::json> list_remote(const std::string& app) const override {
    return modal_call("ls", {{"app", app}}, std::chrono::seconds(60));
  }

  std::vector<std::string> unsnapshotted_spec_keys() const override {
    return {"server_key", "limits_enforced_by", "modal_id", "modal", "modal_ended", "adopted_tags"};
  }

  // The Modal flags; the image is the snapshot's own (create_sandbox).
  void add_snapshot_create_args(const Snapshot& snapshot, std::vector<std::string>* args) const override {
    const nlohmann::json& spec = snapshot.spec;
    if (!spec.value("app", "").empty()) args->insert(args->end(), {"--app", spec.value("app", "")});
    if (!spec.value("region", "").empty()) args->insert(args->end(), {"--region", spec.value("region", "")});
    for (const auto& volume : spec.value("volumes", nlohmann::json::array())) args->insert(args->end(), {"--volume", volume});
    for (const auto& name : spec.value("modal_secrets", nlohmann::json::array())) args->insert(args->end(), {"--modal-secret", name});
    const nlohmann::json tags = spec.value("tags", nlohmann::json::object());  // held: items() refers into it
    for (const auto& [key, value] : tags.items()) args->insert(args->end(), {"--tag", key + "=" + value.get<std::string>()});
  }

  // Modal's snapshot_filesystem: the sandbox's files as a Modal image (Volumes excluded), kept by Modal.
  Status take_snapshot(const SandboxStore&, const SandboxRecord& record, Snapshot* snapshot) const override {
    snapshot->kind = "modal_image";
    auto taken = modal_call("snapshot", {{"modal_id", record.spec.value("modal_id", "")}}, std::chrono::minutes(10));
    if (!taken) return taken.status();
    snapshot->image = taken->value("image_id", "");
    return snapshot->image.empty() ? Status(ErrorCode::internal, "Modal returned no image for the snapshot") : Status::ok();
  }

  Status terminate(const SandboxStore& store, const SandboxRecord& record, std::chrono::milliseconds grace,
                   bool* killed) const override {
    return terminate_modal_sandbox(store, record, grace, killed);
  }

  AgentLogSource agent_log_source(const SandboxRecord&) const override { return AgentLogSource::through_agent; }

  Result<SandboxRecord> adopt(SandboxStore& store, const AdoptRequest& request) const override {
    return adopt_modal_sandbox(store, request.remote_id, request.client_keys, request.server_key, request.name,
                               request.app.empty() ? "gpubox" : request.app);
  }

  std::vector<InfoLine> describe(const SandboxRecord& record, const nlohmann::json&) const override {
    const auto& spec = record.spec;
    const auto& modal = spec.value("modal", nlohmann::json::object());
    return {{"modal:", string_or_dump(modal.value("modal_id", nlohmann::json(""))) + " (app " + spec.value("app", "") + ")"},
            {"tunnel:", string_or_dump(modal.value("tunnel", nlohmann::json(""))) + " (raw TCP, CURVE-secured)"},
            {"gpu:", spec.value("gpu", "").empty() ? "none" : spec.value("gpu", "")},
            {"region:", spec.value("region", "").empty() ? "any" : spec.value("region", "")},
            {"image:", string_or_dump(modal.value("image", nlohmann::json("")))},
            {"network:", string_or_dump(modal.value("network", nlohmann::json("")))}};
  }

  void add_requested(const SandboxRecord& record, nlohmann::json* requested) const override {
    const auto& spec = record.spec;
    (*requested)["gpu"] = modal_gpu(spec.value("gpu", ""));
    (*requested)["region"] = spec.value("region", "").empty() ? nlohmann::json() : nlohmann::json(spec.value("region", ""));
    (*requested)["note"] = "cpu and memory null: Modal's defaults; Modal bills its own per-second prices for these (docs/modal.md)";
  }

  std::string network_hint(const SandboxRecord& record) const override {
    if (record.spec.value("network", "") != "none") return "";
    return " (the sandbox was created with --network none: Modal lets nothing out; create it with --network open)";
  }

 private:
  const std::string name_ = kModalBackend;
  const ControlPlane plane_{"Modal", "modal_id", "sb-", "modal sandbox terminate", "docs/modal.md"};
};

}  // namespace

const Backend& modal_backend() {
  static const ModalBackend backend;
  return backend;
}

}  // namespace gpubox::host
