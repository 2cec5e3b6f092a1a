#include "host/backends/kubernetes/kubernetes.h"

#include "host/backends/kubernetes/kubernetes_backend.h"
#include "host/snapshot.h"

namespace gpubox::host {
namespace {

// --timeout: the Sandbox's shutdownTime and the agent's own deadline (none unless given).
double timeout_of(const CreateRequest& request) {
  const nlohmann::json& config = request.agent_config;
  return config.contains("lifecycle") ? config["lifecycle"].value("timeout_seconds", 0.0) : 0.0;
}

// A sandbox on a Kubernetes cluster: no process of this host; its state is what the cluster said last.
class KubernetesBackend final : public Backend {
 public:
  const std::string& name() const override { return name_; }

  std::vector<BackendFlag> own_flags() const override { return {{"--context"}, {"--namespace"}, {"--warm-pool"}, {"--queue"}}; }

  std::vector<std::string> borrowed_flags() const override { return {"--image", "--ready-timeout", "--volume"}; }

  std::string create_synopsis() const override {
    return "       kubernetes:    [--context NAME] [--namespace NS] [--image REF] [--gpu N] [--queue LOCALQUEUE]\n"
           "                      [--volume CLAIM:/path]... [--warm-pool POOL] [--ready-timeout S]\n"
           "                      (no --mount, --publish, --pids, --network, --seccomp, --userns; docs/kubernetes.md)\n";
  }

  std::string create_options_help() const override {
    return "  kubernetes: an agent-sandbox Sandbox of --image (default gpubox:latest) in --namespace of the kubeconfig's\n"
           "  --context; --gpu N as nvidia.com/gpu limits, --cpu/--memory as limits, --queue as Kueue's queue label,\n"
           "  --volume mounts an existing PersistentVolumeClaim, --timeout sets shutdownTime. --warm-pool claims a\n"
           "  running sandbox of a pool instead (--timeout then ends the claim; the pool's agents have their own\n"
           "  config). The agent is reached at the pod's IP (docs/kubernetes.md).\n";
  }

  Status check_flags(const Args& flags) const override {
    KubernetesSandboxSpec spec;
    return parse_kubernetes_flags(flags, &spec);
  }

  Status check_create(const CreateRequest&) const override { return Status::ok(); }

  // --gpu N, of whatever type the node has.
  GpuAsk gpus_asked(const CreateRequest& request) const override {
    KubernetesSandboxSpec spec;
    if (!parse_kubernetes_flags(*request.flags, &spec)) return {};
    return {"", static_cast<double>(spec.gpus)};
  }

  GpuAsk gpus_recorded(const SandboxRecord& record) const override {
    return {"", record.spec.value("gpu_count", 0.0)};
  }

  double timeout_asked(const CreateRequest& request) const override { return timeout_of(request); }

  std::string group_asked(const CreateRequest& request) const override {
    KubernetesSandboxSpec spec;
    (void)parse_kubernetes_flags(*request.flags, &spec);
    return spec.namespace_name;
  }

  std::string group_recorded(const SandboxRecord& record) const override { return record.spec.value("namespace", ""); }

  Result<SandboxRecord> create(SandboxStore& store, const CreateRequest& request) const override {
    KubernetesSandboxSpec spec;
    if (Status flags = parse_kubernetes_flags(*request.flags, &spec); !flags) return flags;
    if (request.from) return Status::invalid_request("--from-snapshot: Kubernetes sandboxes have no snapshots");
    spec.timeout_s = timeout_of(request);
    spec.cpu = request.limits.cpus;
    spec.memory_mib = request.limits.memory_mib;
    spec.name = request.name;
    spec.agent_config = request.agent_config;
    nlohmann::json pub = request.public_spec;
    pub.erase("seccomp");
    pub["pids"] = 0;
    pub["timeout_s"] = spec.timeout_s;
    pub["gpu_count"] = spec.gpus;
    pub["image"] = spec.warm_pool.empty() ? spec.image : "";
    pub["queue"] = spec.queue;
    pub["volumes"] = nlohmann::json::array();
    for (const auto& volume : spec.volumes) pub["volumes"].push_back(volume.claim + ":" + volume.path);
    spec.public_spec = std::move(pub);
    return create_kubernetes_sandbox(store, spec);
  }

  std::string state(const SandboxRecord& record) const override { return kubernetes_state(record); }

  bool state_is_remote() const override { return true; }

  const ControlPlane* control_plane() const override { return &plane_; }

  std::string own_end_reason() const override { return "ended_on_kubernetes"; }

  Status refresh_states(const SandboxStore& store, std::vector<SandboxRecord*> records) const override {
    return refresh_kubernetes_states(store, std::move(records));
  }

  SandboxEnd end(const SandboxRecord& record) const override {
    return end_reported(own_end_reason(), "the cluster", record.spec.value("kubernetes_ended", nlohmann::json::object()));
  }

  // group: the namespace.
  Result<nlohmann::json> list_remote(const std::string& group) const override {
    return kubernetes_call("ls", {{"namespace", group.empty() ? "default" : group}}, std::chrono::seconds(60));
  }

  std::vector<std::string> unsnapshotted_spec_keys() const override {
    return {"server_key", "limits_enforced_by", "kubernetes_id", "kubernetes", "kubernetes_ended", "adopted_labels"};
  }

  Status take_snapshot(const SandboxStore&, const SandboxRecord&, Snapshot*) const override {
    return Status::invalid_request("snapshots of Kubernetes sandboxes are not supported (keep data on a --volume CLAIM:/path)");
  }

  Status terminate(const SandboxStore& store, const SandboxRecord& record, std::chrono::milliseconds grace,
                   bool* killed) const override {
    return terminate_kubernetes_sandbox(store, record, grace, killed);
  }

  AgentLogSource agent_log_source(const SandboxRecord&) const override { return AgentLogSource::through_agent; }

  Result<SandboxRecord> adopt(SandboxStore& store, const AdoptRequest& request) const override {
    return adopt_kubernetes_sandbox(store, request);
  }

  std::vector<InfoLine> describe(const SandboxRecord& record, const nlohmann::json&) const override {
    const auto where = record.spec.value("kubernetes", nlohmann::json::object());
    std::string context = where.value("context", "");
    std::string pool = where.value("warm_pool", "");
    return {{"kubernetes:", where.value("kind", "Sandbox") + " " + where.value("namespace", "") + "/" +
                                where.value("kubernetes_id", "") + " (context " + (context.empty() ? "current" : context) + ")"},
            {"pod ip:", where.value("pod_ip", "") + " (CURVE-secured)"},
            {"gpu:", record.spec.value("gpu_count", 0) > 0 ? std::to_string(record.spec.value("gpu_count", 0)) + " x nvidia.com/gpu" : "none"},
            {"image:", pool.empty() ? record.spec.value("image", "") : "warm pool " + pool + "'s"},
            {"network:", "the cluster's pod network and NetworkPolicies"}};
  }

  void add_requested(const SandboxRecord& record, nlohmann::json* requested) const override {
    int gpus = record.spec.value("gpu_count", 0);
    (*requested)["gpu"] = gpus > 0 ? nlohmann::json{{"type", "nvidia.com/gpu"}, {"count", gpus}} : nlohmann::json();
    (*requested)["note"] = "cpu and memory null: the namespace's defaults (its LimitRange)";
  }

 private:
  const std::string name_ = kKubernetesBackend;
  const ControlPlane plane_{"Kubernetes", "kubernetes_id", "gpubox-", "kubectl delete sandbox", "docs/kubernetes.md"};
};

}  // namespace

const Backend& kubernetes_backend() {
  static const KubernetesBackend backend;
  return backend;
}

}  // namespace gpubox::host
