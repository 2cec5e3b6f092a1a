#include "host/sandboxes/snapshots.h"

#include <sys/stat.h>

#include <cerrno>
#include <ctime>
#include <filesystem>

#include "host/backends/registry.h"

namespace gpubox::host {
namespace {

namespace fs = std::filesystem;

std::string default_name(const SandboxRecord& record) {
  char stamp[32];
  std::time_t now = std::time(nullptr);
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::gmtime(&now));
  return (record.name.empty() ? record.id : record.name) + "-" + stamp;
}

}  // namespace

Result<Snapshot> take_snapshot(const SandboxStore& store, const SandboxRecord& record, const std::string& given) {
  std::string name = given.empty() ? default_name(record) : given;
  if (!valid_sandbox_name(name)) {
    return Status(ErrorCode::invalid_request,
                  "--name '" + name + "': expected 1-63 of A-Z a-z 0-9 _ . - starting with a letter or digit");
  }
  auto backend = backend_of(record);
  if (!backend) return backend.status();
  std::error_code error;
  fs::create_directories(snapshots_dir(store), error);
  Snapshot snapshot;
  snapshot.name = name;
  snapshot.dir = snapshots_dir(store) + "/" + name;
  if (::mkdir(snapshot.dir.c_str(), 0700) != 0) {
    if (errno == EEXIST) return Status(ErrorCode::already_exists, "a snapshot named '" + name + "' exists already");
    return Status::from_errno(errno, "cannot create '" + snapshot.dir + "'");
  }
  snapshot.backend = record.backend;
  snapshot.source_id = record.id;
  snapshot.source_name = record.name;
  snapshot.spec = record.spec;
  // What names the running sandbox (its container, relay, remote id) does not belong in its snapshot.
  for (const std::string& transient : (*backend)->unsnapshotted_spec_keys()) snapshot.spec.erase(transient);
  snapshot.created_at = static_cast<double>(std::time(nullptr));
  Status taken = (*backend)->take_snapshot(store, record, &snapshot);
  if (taken) taken = write_private_file(snapshot.config_path(), record.spec.value("agent_config", nlohmann::json::object()).dump(2));
  if (taken) taken = write_private_file(snapshot.dir + "/snapshot.json", snapshot.to_json().dump(2) + "\n");
  if (!taken) {
    (void)remove_snapshot(store, snapshot);
    return taken;
  }
  return snapshot;
}

Status remove_snapshot(const SandboxStore& store, const Snapshot& snapshot) {
  if (snapshot.dir.rfind(snapshots_dir(store) + "/", 0) != 0) {
    return Status(ErrorCode::internal, "refusing to remove '" + snapshot.dir + "': not in the store");
  }
  if (const Backend* backend = find_backend(snapshot.backend)) {
    if (Status removed = backend->remove_snapshot(snapshot); !removed) return removed;
  }
  std::error_code error;
  fs::remove_all(snapshot.dir, error);
  if (error) return Status(ErrorCode::permission_denied, "cannot remove '" + snapshot.dir + "': " + error.message());
  return Status::ok();
}

std::vector<std::string> snapshot_create_args(const Snapshot& snapshot) {
  const nlohmann::json& spec = snapshot.spec;
  auto number = [](const nlohmann::json& value) { return value.dump(); };
  std::vector<std::string> args = {"--backend", snapshot.backend, "--config", snapshot.config_path()};
  if (spec.value("cpu", 0.0) > 0) args.insert(args.end(), {"--cpu", number(spec["cpu"])});
  if (spec.value("memory_mib", 0ULL) > 0) args.insert(args.end(), {"--memory", number(spec["memory_mib"])});
  if (spec.value("pids", 0ULL) > 0) args.insert(args.end(), {"--pids", number(spec["pids"])});
  if (const Backend* backend = find_backend(snapshot.backend)) backend->add_snapshot_create_args(snapshot, &args);
  if (spec.contains("network")) args.insert(args.end(), {"--network", spec.value("network", "none")});
  if (spec.value("timeout_s", 0.0) > 0) args.insert(args.end(), {"--timeout", number(spec["timeout_s"])});
  if (spec.value("idle_timeout_s", 0.0) > 0) args.insert(args.end(), {"--idle-timeout", number(spec["idle_timeout_s"])});
  if (!spec.value("gpu", "").empty()) args.insert(args.end(), {"--gpu", spec.value("gpu", "")});
  if (spec.value("userns", false)) args.push_back("--userns");
  if (spec.value("seccomp", "default") == "unconfined") args.insert(args.end(), {"--seccomp", "unconfined"});
  for (const auto& mount : spec.value("mounts", nlohmann::json::array())) {
    args.insert(args.end(), {"--mount", mount.value("source", "") + ":" + mount.value("target", "") +
                                            (mount.value("read_only", false) ? ":ro" : "")});
  }
  for (const auto& secret : spec.value("secrets", nlohmann::json::array())) args.insert(args.end(), {"--secret", secret});
  return args;
}

}  // namespace gpubox::host
