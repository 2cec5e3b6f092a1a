#include "host/backends/kubernetes/kubernetes_backend.h"

#include <unistd.h>

#include <map>
#include <utility>

#include "host/backends/python_module.h"
#include "host/sandbox_keys.h"
#include "rpc/keys.h"

namespace gpubox::host {
namespace {

nlohmann::json keys_json(const rpc::KeyPair& keys) {
  return {{"public_key", keys.public_key}, {"secret_key", keys.secret_key}};
}

nlohmann::json create_request(const KubernetesSandboxSpec& spec, const SandboxRecord& record, const nlohmann::json& config,
                              const std::string& server_public, const rpc::KeyPair& client_keys) {
  nlohmann::json volumes = nlohmann::json::array();
  for (const auto& volume : spec.volumes) volumes.push_back({{"claim", volume.claim}, {"path", volume.path}});
  return {{"context", spec.context},
          {"namespace", spec.namespace_name},
          {"image", spec.image},
          {"warm_pool", spec.warm_pool},
          {"queue", spec.queue},
          {"gpu", spec.gpus},
          {"cpu", spec.cpu},
          {"memory_mib", spec.memory_mib},
          {"timeout_s", spec.timeout_s},
          {"volumes", volumes},
          {"name", spec.name},
          {"gpubox_id", record.id},
          {"agent_config", config},
          {"server_public_key", server_public},
          {"client_keys", keys_json(client_keys)},
          {"ready_timeout_s", static_cast<double>(spec.ready_timeout.count()) / 1000.0}};
}

// What a create or adopt learnt of where the sandbox runs, as the record keeps it.
void record_where(const nlohmann::json& answer, SandboxRecord* record) {
  record->endpoint = answer.value("endpoint", "");
  for (const char* key : {"kubernetes_id", "kind", "namespace", "context", "pod_ip", "secret", "warm_pool", "sandbox"}) {
    if (answer.contains(key)) record->spec["kubernetes"][key] = answer[key];
  }
  record->spec["kubernetes_id"] = answer.value("kubernetes_id", "");
  record->spec["namespace"] = answer.value("namespace", "");
}

}  // namespace

Result<nlohmann::json> kubernetes_call(const std::string& command, const nlohmann::json& request,
                                       std::chrono::milliseconds timeout) {
  static const PythonModule kModule{"gpubox.kubernetes_backend", "kubernetes", "the official Kubernetes client",
                                    "pip install 'gpubox[kubernetes]'"};
  return call_python_module(kModule, command, request, timeout);
}

nlohmann::json kubernetes_where(const SandboxRecord& record) {
  const nlohmann::json where = record.spec.value("kubernetes", nlohmann::json::object());
  return {{"context", where.value("context", "")},
          {"namespace", where.value("namespace", "default")},
          {"kind", where.value("kind", "Sandbox")},
          {"kubernetes_id", where.value("kubernetes_id", "")},
          {"secret", where.value("secret", "")}};
}

Result<SandboxRecord> create_kubernetes_sandbox(SandboxStore& store, const KubernetesSandboxSpec& spec) {
  auto server_keys = rpc::generate_keypair();
  auto client_keys = rpc::generate_keypair();
  if (!server_keys) return server_keys.status();
  if (!client_keys) return client_keys.status();
  nlohmann::json public_spec = spec.public_spec;
  public_spec["server_key"] = server_keys->public_key;
  auto reserved = store.reserve(spec.name, public_spec);
  if (!reserved) return reserved.status();
  SandboxRecord record = std::move(*reserved);
  record.backend = kKubernetesBackend;
  ::rmdir(record.work_dir().c_str());  // the work dir is the pod's own /workspace
  auto fail = [&](Status status) -> Status {
    (void)store.remove(record);
    return status;
  };
  if (Status saved = store.save(record); !saved) return fail(saved);

  nlohmann::json config = spec.agent_config;
  config["rpc"]["endpoints"] = {"tcp://0.0.0.0:" + std::to_string(kImageAgentPort)};
  config["rpc"]["secret_key"] = server_keys->secret_key;
  config["rpc"]["authorized_keys"] = {client_keys->public_key};
  if (spec.timeout_s > 0) config["lifecycle"]["timeout_seconds"] = spec.timeout_s;
  auto created = kubernetes_call("create", create_request(spec, record, config, server_keys->public_key, *client_keys),
                                 spec.ready_timeout + std::chrono::seconds(120));
  if (!created) return fail(created.status());
  record_where(*created, &record);
  // A warm pool's agents hold the pool's keys: those are the ones to connect with.
  rpc::KeyPair keys = *client_keys;
  if (created->contains("client_keys")) {
    keys = {(*created)["client_keys"].value("public_key", ""), (*created)["client_keys"].value("secret_key", "")};
    record.spec["server_key"] = created->value("server_key", "");
  }
  auto by_cluster = [](bool set, const char* what) {
    return set ? std::string("Kubernetes (") + what + " limit)" : std::string("the namespace's defaults");
  };
  record.spec["limits_enforced_by"] = {{"cpu", by_cluster(spec.cpu > 0, "cpu")},
                                       {"memory", by_cluster(spec.memory_mib > 0, "memory")},
                                       {"pids", "the node's pids limit"}};
  Status saved = save_client_keys(record, keys);
  if (saved) saved = store.save(record);
  if (!saved) {
    (void)kubernetes_call("terminate", kubernetes_where(record));
    return fail(saved);
  }
  return record;
}

Status terminate_kubernetes_sandbox(const SandboxStore& store, const SandboxRecord& record, std::chrono::milliseconds grace,
                                    bool* killed) {
  if (killed) *killed = false;
  if (record.spec.value("kubernetes_id", "").empty()) return store.remove(record);  // its create never reached the cluster
  bool asked = kubernetes_state(record) == "running" && ask_agent_to_shut_down(record);
  // The agent exits after its grace; as PID 1 its exit ends the pod (restartPolicy Never).
  nlohmann::json request = kubernetes_where(record);
  request["wait_s"] = asked ? static_cast<double>(grace.count()) / 1000.0 + 10 : 0;
  auto ended = kubernetes_call("terminate", request, grace + std::chrono::seconds(120));
  if (!ended) {
    return Status(ended.status().code(), "Kubernetes delete " + request.value("kubernetes_id", "") + ": " + ended.status().message());
  }
  if (killed) *killed = ended->value("terminated", false);
  return store.remove(record);
}

Result<SandboxRecord> adopt_kubernetes_sandbox(SandboxStore& store, const AdoptRequest& request) {
  std::string ns = request.app.empty() ? "default" : request.app;
  for (const auto& existing : store.list()) {
    if (existing.backend == kKubernetesBackend && existing.spec.value("kubernetes_id", "") == request.remote_id &&
        existing.spec.value("namespace", "") == ns) {
      return Status(ErrorCode::already_exists, "Kubernetes sandbox " + ns + "/" + request.remote_id + " is in the store already as " + existing.id);
    }
  }
  auto adopted = kubernetes_call("adopt", {{"namespace", ns},
                                           {"kubernetes_id", request.remote_id},
                                           {"server_public_key", request.server_key},
                                           {"client_keys", keys_json(request.client_keys)}});
  if (!adopted) return adopted.status();
  auto reserved = store.reserve(request.name, {{"server_key", request.server_key}, {"adopted", true}});
  if (!reserved) return reserved.status();
  SandboxRecord record = std::move(*reserved);
  ::rmdir(record.work_dir().c_str());
  record.backend = kKubernetesBackend;
  record_where(*adopted, &record);
  record.spec["adopted_labels"] = adopted->value("tags", nlohmann::json::object());
  Status saved = save_client_keys(record, request.client_keys);
  if (saved) saved = store.save(record);
  if (!saved) {
    (void)store.remove(record);
    return saved;
  }
  return record;
}

std::string kubernetes_state(const SandboxRecord& record) {
  if (record.spec.contains("kubernetes_ended")) return "dead";
  return record.spec.value("kubernetes_id", "").empty() ? "creating" : "running";
}

Status refresh_kubernetes_states(const SandboxStore& store, std::vector<SandboxRecord*> records) {
  // One call per cluster and namespace.
  std::map<std::pair<std::string, std::string>, std::vector<SandboxRecord*>> by_place;
  for (auto* record : records) {
    if (record->backend != kKubernetesBackend || kubernetes_state(*record) != "running") continue;
    nlohmann::json where = kubernetes_where(*record);
    by_place[{where["context"].get<std::string>(), where["namespace"].get<std::string>()}].push_back(record);
  }
  for (const auto& [place, group] : by_place) {
    nlohmann::json request = {{"context", place.first}, {"namespace", place.second}, {"sandboxes", nlohmann::json::array()}};
    for (const auto* record : group) request["sandboxes"].push_back(kubernetes_where(*record));
    auto states = kubernetes_call("info", request, std::chrono::seconds(60));
    if (!states) return states.status();
    const auto& by_id = (*states)["sandboxes"];
    for (auto* record : group) {
      std::string id = record->spec.value("kubernetes_id", "");
      if (!by_id.contains(id) || by_id[id].value("state", "") != "dead") continue;
      record->spec["kubernetes_ended"] = by_id[id].value("ended", nlohmann::json::object());
      if (Status saved = store.save(*record); !saved) return saved;
    }
  }
  return Status::ok();
}

}  // namespace gpubox::host
