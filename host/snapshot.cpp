#include "host/snapshot.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "host/backends/registry.h"
#include "base/safe_extractor.h"
#include "base/fd.h"

namespace gpubox::host {
namespace {

namespace fs = std::filesystem;

std::string snapshots_dir(const SandboxStore& store) { return store.root() + "/snapshots"; }

Result<Snapshot> from_json(const nlohmann::json& json, const std::string& dir) {
  try {
    Snapshot snapshot;
    snapshot.name = json.at("name");
    snapshot.kind = json.at("kind");
    snapshot.backend = json.at("backend");
    snapshot.source_id = json.value("source_id", "");
    snapshot.source_name = json.value("source_name", "");
    snapshot.image = json.value("image", "");
    snapshot.created_at = json.value("created_at", 0.0);
    snapshot.size_bytes = json.value("size_bytes", std::uint64_t{0});
    snapshot.spec = json.value("spec", nlohmann::json::object());
    if (json.contains("layer")) {
      snapshot.layer_sha256 = json["layer"].at("sha256");
      snapshot.layer_size = json["layer"].value("size", std::uint64_t{0});
    }
    snapshot.dir = dir;
    return snapshot;
  } catch (const nlohmann::json::exception& e) {
    return Status(ErrorCode::invalid_request, std::string("snapshot record: ") + e.what());
  }
}

std::string default_name(const SandboxRecord& record) {
  char stamp[32];
  std::time_t now = std::time(nullptr);
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::gmtime(&now));
  return (record.name.empty() ? record.id : record.name) + "-" + stamp;
}

}  // namespace

Status write_private_file(const std::string& path, const std::string& text) {
  std::string temp = path + ".tmp";
  Fd fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!fd.valid() || write_fully(fd.get(), text.data(), text.size()) != 0) {
    return Status::from_errno(errno, "cannot write '" + temp + "'");
  }
  fd.reset();
  if (::rename(temp.c_str(), path.c_str()) != 0) return Status::from_errno(errno, "cannot write '" + path + "'");
  return Status::ok();
}

nlohmann::json Snapshot::to_json() const {
  nlohmann::json json = {{"name", name},         {"kind", kind},       {"backend", backend},       {"source_id", source_id},
                         {"source_name", source_name}, {"image", image}, {"created_at", created_at}, {"size_bytes", size_bytes},
                         {"spec", spec}};
  if (has_layer()) json["layer"] = {{"archive", "upper.tar.zst"}, {"sha256", layer_sha256}, {"size", layer_size}};
  return json;
}

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
  for (const char* transient : {"relay", "container", "server_key", "limit_plan", "limits_enforced_by", "root_mount_points",
                                "modal_id", "modal", "modal_ended", "adopted_tags"}) {
    snapshot.spec.erase(transient);
  }
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

std::vector<Snapshot> list_snapshots(const SandboxStore& store) {
  std::vector<Snapshot> found;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(snapshots_dir(store), error)) {
    std::ifstream in(entry.path() / "snapshot.json");
    auto json = nlohmann::json::parse(in, nullptr, false);
    if (!in || json.is_discarded()) continue;
    if (auto snapshot = from_json(json, entry.path().string())) found.push_back(std::move(*snapshot));
  }
  std::sort(found.begin(), found.end(), [](const Snapshot& a, const Snapshot& b) { return a.created_at < b.created_at; });
  return found;
}

Result<Snapshot> find_snapshot(const SandboxStore& store, const std::string& name) {
  if (valid_sandbox_name(name)) {
    std::string dir = snapshots_dir(store) + "/" + name;
    std::ifstream in(dir + "/snapshot.json");
    auto json = nlohmann::json::parse(in, nullptr, false);
    if (in && !json.is_discarded()) return from_json(json, dir);
  }
  return Status(ErrorCode::not_found, "no snapshot named '" + name + "' (see gpubox snapshots)");
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
  if (snapshot.kind == "image") args.insert(args.end(), {"--image", snapshot.image});
  if (spec.value("cpu", 0.0) > 0) args.insert(args.end(), {"--cpu", number(spec["cpu"])});
  if (spec.value("memory_mib", 0ULL) > 0) args.insert(args.end(), {"--memory", number(spec["memory_mib"])});
  if (spec.value("pids", 0ULL) > 0) args.insert(args.end(), {"--pids", number(spec["pids"])});
  if (snapshot.kind == "modal_image") {  // the Modal flags; the image is the snapshot's own (create_sandbox)
    if (!spec.value("app", "").empty()) args.insert(args.end(), {"--app", spec.value("app", "")});
    if (!spec.value("region", "").empty()) args.insert(args.end(), {"--region", spec.value("region", "")});
    for (const auto& volume : spec.value("volumes", nlohmann::json::array())) args.insert(args.end(), {"--volume", volume});
    for (const auto& name : spec.value("modal_secrets", nlohmann::json::array())) args.insert(args.end(), {"--modal-secret", name});
    const nlohmann::json tags = spec.value("tags", nlohmann::json::object());  // held: items() refers into it
    for (const auto& [key, value] : tags.items()) {
      args.insert(args.end(), {"--tag", key + "=" + value.get<std::string>()});
    }
  }
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

Status restore_snapshot_files(const Snapshot& snapshot, const SandboxRecord& record) {
  if (snapshot.kind != "archive") return Status::ok();
  std::ifstream in(snapshot.dir + "/manifest.json");
  auto manifest = nlohmann::json::parse(in, nullptr, false);
  if (!in || manifest.is_discarded()) return Status(ErrorCode::internal, "snapshot " + snapshot.name + ": its manifest is unreadable");
  std::string staging = record.work_dir() + "/.gpubox-restore";
  auto extracted = harvest::extract_archive(snapshot.archive_path(), staging);
  if (!extracted) return extracted.status();
  Status checked = harvest::verify_manifest(staging, manifest);
  std::error_code error;
  if (checked) {
    for (const auto& entry : fs::directory_iterator(staging + "/out", error)) {
      fs::rename(entry.path(), fs::path(record.work_dir()) / entry.path().filename(), error);
      if (error) break;
    }
    if (error) checked = Status(ErrorCode::internal, "restoring the work dir: " + error.message());
  }
  fs::remove_all(staging, error);
  return checked;
}

}  // namespace gpubox::host
