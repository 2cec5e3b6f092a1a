#include "host/backends/modal/modal_backend.h"

#include <unistd.h>

#include "host/backends/backend.h"
#include "host/backends/python_module.h"
#include "host/sandbox_keys.h"
#include "rpc/keys.h"

namespace gpubox::host {
namespace {

nlohmann::json create_request(const ModalSandboxSpec& spec, const SandboxRecord& record, const nlohmann::json& config,
                              const std::string& server_public, const rpc::KeyPair& client_keys) {
  nlohmann::json volumes = nlohmann::json::array();
  for (const auto& volume : spec.volumes) volumes.push_back({{"name", volume.name}, {"path", volume.path}});
  nlohmann::json request = {{"app", spec.app},
                            {"image", spec.image},
                            {"agent", spec.agent_path},
                            {"gpu", spec.gpu},
                            {"region", spec.region},
                            {"timeout_s", spec.timeout_s},
                            {"volumes", volumes},
                            {"modal_secrets", spec.modal_secrets},
                            {"network", spec.network},
                            {"cidrs", spec.cidrs},
                            {"tags", spec.tags},
                            {"name", spec.name},
                            {"gpubox_id", record.id},
                            {"agent_config", config},
                            {"server_public_key", server_public},
                            {"client_keys", {{"public_key", client_keys.public_key}, {"secret_key", client_keys.secret_key}}},
                            {"ready_timeout_s", static_cast<double>(spec.ready_timeout.count()) / 1000.0}};
  if (!spec.from_snapshot.empty()) request["from_snapshot"] = spec.from_snapshot;
  if (spec.cpu > 0) request["cpu"] = spec.cpu;
  if (spec.memory_mib > 0) request["memory_mib"] = spec.memory_mib;
  return request;
}

}  // namespace

std::string modal_state_dir(const std::string& id) { return std::string(kSandboxStateDir) + "/" + id; }

Result<nlohmann::json> modal_call(const std::string& command, const nlohmann::json& request,
                                  std::chrono::milliseconds timeout) {
  static const PythonModule kModule{"gpubox.modal_backend", "modal", "Modal's SDK", "pip install 'gpubox[modal]'"};
  return call_python_module(kModule, command, request, timeout);
}

Result<SandboxRecord> create_modal_sandbox(SandboxStore& store, const ModalSandboxSpec& spec) {
  if (::access(spec.agent_path.c_str(), R_OK) != 0) {
    return Status(ErrorCode::invalid_request, "the agent binary '" + spec.agent_path + "' is not readable (set GPUBOX_AGENT)");
  }
  auto server_keys = rpc::generate_keypair();
  auto client_keys = rpc::generate_keypair();
  if (!server_keys) return server_keys.status();
  if (!client_keys) return client_keys.status();
  nlohmann::json public_spec = spec.public_spec;
  public_spec["server_key"] = server_keys->public_key;
  public_spec["app"] = spec.app;
  auto reserved = store.reserve(spec.name, public_spec);
  if (!reserved) return reserved.status();
  SandboxRecord record = std::move(*reserved);
  record.backend = kModalBackend;
  ::rmdir(record.work_dir().c_str());  // the work dir is the sandbox's own /workspace
  auto fail = [&](Status status) -> Status {
    (void)store.remove(record);
    return status;
  };
  if (Status saved = save_client_keys(record, *client_keys); !saved) return fail(saved);
  if (Status saved = store.save(record); !saved) return fail(saved);

  nlohmann::json config = spec.agent_config;
  // One state dir per sandbox: a snapshot keeps the whole file system, and a sandbox restored from it must
  // not replay the jobs journal of the one it came from (a container's state dir is a host bind mount instead).
  record.spec["state_dir"] = modal_state_dir(record.id);
  config["state_dir"] = record.spec["state_dir"];
  config["seccomp"] = {{"profile", "unconfined"}};  // gVisor filters the whole sandbox
  config["rpc"]["endpoints"] = {"tcp://0.0.0.0:" + std::to_string(kImageAgentPort)};
  config["rpc"]["secret_key"] = server_keys->secret_key;
  config["rpc"]["authorized_keys"] = {client_keys->public_key};
  config["lifecycle"]["timeout_seconds"] = spec.timeout_s;
  auto created = modal_call("create", create_request(spec, record, config, server_keys->public_key, *client_keys),
                            spec.ready_timeout + std::chrono::seconds(300));
  if (!created) return fail(created.status());
  record.endpoint = created->value("endpoint", "");
  for (const char* key : {"modal_id", "app_id", "tunnel", "gpu", "region", "image", "network", "ready_s"}) {
    if (created->contains(key)) record.spec["modal"][key] = (*created)[key];
  }
  record.spec["modal_id"] = created->value("modal_id", "");
  auto by_modal = [](bool set, const char* what) { return set ? std::string("Modal (") + what + ")" : std::string("Modal's default"); };
  record.spec["limits_enforced_by"] = {{"cpu", by_modal(spec.cpu > 0, "cpu=")},
                                       {"memory", by_modal(spec.memory_mib > 0, "memory=")},
                                       {"pids", "Modal sets no pids limit"}};
  if (Status saved = store.save(record); !saved) {
    (void)modal_call("terminate", {{"modal_id", record.spec["modal_id"]}});
    return fail(saved);
  }
  return record;
}

Result<SandboxRecord> adopt_modal_sandbox(SandboxStore& store, const std::string& modal_id, const rpc::KeyPair& client_keys,
                                          const std::string& server_key, const std::string& name, const std::string& app) {
  for (const auto& existing : store.list()) {
    if (existing.spec.value("modal_id", "") == modal_id) {
      return Status(ErrorCode::already_exists, "Modal sandbox " + modal_id + " is in the store already as " + existing.id);
    }
  }
  nlohmann::json keys = {{"public_key", client_keys.public_key}, {"secret_key", client_keys.secret_key}};
  auto adopted = modal_call("adopt", {{"modal_id", modal_id}, {"server_public_key", server_key}, {"client_keys", keys}});
  if (!adopted) return adopted.status();
  auto reserved = store.reserve(name, {{"server_key", server_key}, {"app", app}, {"adopted", true}});
  if (!reserved) return reserved.status();
  SandboxRecord record = std::move(*reserved);
  ::rmdir(record.work_dir().c_str());
  record.backend = kModalBackend;
  record.endpoint = adopted->value("endpoint", "");
  record.spec["modal_id"] = modal_id;
  record.spec["modal"] = {{"modal_id", modal_id}, {"tunnel", adopted->value("tunnel", "")}};
  record.spec["adopted_tags"] = adopted->value("tags", nlohmann::json::object());
  // The state dir its creator chose: per its gpubox id (the tag), or the one of sandboxes made before that.
  std::string created_as = record.spec["adopted_tags"].value("gpubox.sandbox", "");
  record.spec["state_dir"] = created_as.empty() ? std::string(kSandboxStateDir) : modal_state_dir(created_as);
  Status saved = save_client_keys(record, client_keys);
  if (saved) saved = store.save(record);
  if (!saved) {
    (void)store.remove(record);
    return saved;
  }
  return record;
}

Status terminate_modal_sandbox(const SandboxStore& store, const SandboxRecord& record, std::chrono::milliseconds grace,
                               bool* killed) {
  if (killed) *killed = false;
  std::string modal_id = record.spec.value("modal_id", "");
  if (modal_id.empty()) return store.remove(record);  // its create never reached Modal
  bool asked = modal_state(record) == "running" && ask_agent_to_shut_down(record);
  // The agent exits after its grace; as PID 1 its exit ends the sandbox, which Modal then reports.
  double wait_s = asked ? static_cast<double>(grace.count()) / 1000.0 + 10 : 0;
  auto ended = modal_call("terminate", {{"modal_id", modal_id}, {"wait_s", wait_s}}, grace + std::chrono::seconds(120));
  if (!ended) return Status(ended.status().code(), "Modal terminate " + modal_id + ": " + ended.status().message());
  if (killed) *killed = ended->value("terminated", false);  // it did not end by itself in time
  return store.remove(record);
}

std::string modal_state(const SandboxRecord& record) {
  if (record.spec.contains("modal_ended")) return "dead";
  return record.spec.value("modal_id", "").empty() ? "creating" : "running";
}

Status refresh_modal_states(const SandboxStore& store, std::vector<SandboxRecord*> records) {
  nlohmann::json ids = nlohmann::json::array();
  for (const auto* record : records) {
    if (record->backend == kModalBackend && modal_state(*record) == "running") ids.push_back(record->spec.value("modal_id", ""));
  }
  if (ids.empty()) return Status::ok();
  auto states = modal_call("info", {{"modal_ids", ids}}, std::chrono::seconds(60));
  if (!states) return states.status();
  const auto& by_id = (*states)["sandboxes"];
  for (auto* record : records) {
    std::string modal_id = record->spec.value("modal_id", "");
    if (!by_id.contains(modal_id)) continue;
    const auto& state = by_id[modal_id];
    if (state.value("state", "") != "dead") continue;
    record->spec["modal_ended"] = state.value("ended", nlohmann::json::object());
    if (Status saved = store.save(*record); !saved) return saved;
  }
  return Status::ok();
}

}  // namespace gpubox::host
