#include "host/snapshot.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "base/stager.h"
#include "host/container_backend.h"
#include "host/container_engine.h"
#include "host/layer_archive.h"
#include "host/local_backend.h"
#include "host/modal_backend.h"
#include "host/sandbox_root.h"
#include "base/safe_extractor.h"
#include "base/fd.h"

namespace gpubox::host {
namespace {

namespace fs = std::filesystem;

std::string snapshots_dir(const SandboxStore& store) { return store.root() + "/snapshots"; }

Status write_private(const std::string& path, const std::string& text) {
  std::string temp = path + ".tmp";
  Fd fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!fd.valid() || write_fully(fd.get(), text.data(), text.size()) != 0) {
    return Status::from_errno(errno, "cannot write '" + temp + "'");
  }
  fd.reset();
  if (::rename(temp.c_str(), path.c_str()) != 0) return Status::from_errno(errno, "cannot write '" + path + "'");
  return Status::ok();
}

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

// Commits the container as localhost/gpubox-snapshot:NAME.
Status commit_container(const SandboxRecord& record, Snapshot& snapshot) {
  std::string engine = record.spec.value("engine", record.backend);
  snapshot.image = "localhost/gpubox-snapshot:" + snapshot.name;
  auto committed = run_engine(engine, {"commit", record.spec.value("container", container_name(record.id)), snapshot.image},
                              std::chrono::minutes(30));
  if (!committed) return committed.status();
  if (committed->status != 0) return Status(ErrorCode::internal, engine + " commit: " + committed->error_line());
  auto size = run_engine(engine, {"image", "inspect", "--format", "{{.Size}}", snapshot.image});
  if (size && size->status == 0) snapshot.size_bytes = std::strtoull(size->out.c_str(), nullptr, 10);
  return Status::ok();
}

// Modal's snapshot_filesystem: the sandbox's files as a Modal image (Volumes excluded), kept by Modal.
Status snapshot_modal(const SandboxRecord& record, Snapshot& snapshot) {
  auto taken = modal_call("snapshot", {{"modal_id", record.spec.value("modal_id", "")}}, std::chrono::minutes(10));
  if (!taken) return taken.status();
  snapshot.image = taken->value("image_id", "");
  return snapshot.image.empty() ? Status(ErrorCode::internal, "Modal returned no image for the snapshot") : Status::ok();
}

// Stages the local sandbox's work dir (the jobs' stager: tar + zstd, sha256 manifest).
Status archive_work_dir(const SandboxRecord& record, Snapshot& snapshot) {
  jobs::StageRequest request;
  request.out_dir = record.work_dir();
  request.archive_path = snapshot.archive_path();
  jobs::StageOutcome outcome = jobs::stage_outputs(request);
  if (!outcome.summary.archive_written) {
    return Status(ErrorCode::resource_exhausted, "cannot archive the work dir: " + outcome.summary.error);
  }
  if (!outcome.manifest.missing.empty()) {
    return Status(ErrorCode::internal, "cannot archive the work dir: " + outcome.manifest.missing.front());
  }
  snapshot.size_bytes = outcome.manifest.archive_size;
  return write_private(snapshot.dir + "/manifest.json", outcome.manifest.to_json().dump(2) + "\n");
}

// The sandbox paths where its root mounts something, as its record says
// (records from before it did: as a root plan of the time would have them).
std::vector<std::string> mount_points_of(const SandboxStore& store, const SandboxRecord& record) {
  if (record.spec.contains("root_mount_points")) return record.spec["root_mount_points"].get<std::vector<std::string>>();
  RootPlan plan;
  plan.hidden = {"/root", "/home", store.root()};
  plan.binds.push_back({record.agent_dir(), kSandboxStateDir});
  plan.binds.push_back({record.work_dir(), kSandboxWorkDir});
  for (const auto& mount : record.spec.value("mounts", nlohmann::json::array())) {
    plan.binds.push_back({mount.value("source", ""), mount.value("target", "")});
  }
  return root_mount_points(plan);
}

// The host's id of the sandbox's 0 and how many it has, from a map like
// "0 100000 65536" (none: ids are the host's).
void id_range_of(const nlohmann::json& map, std::uint32_t* base, std::uint64_t* count) {
  unsigned long inside = 0, outside = 0, length = 0;
  if (map.is_string() && std::sscanf(map.get<std::string>().c_str(), "%lu %lu %lu", &inside, &outside, &length) == 3 && inside == 0) {
    *base = static_cast<std::uint32_t>(outside);
    *count = length;
  }
}

// Archives the local sandbox's upper layer (what it installed, changed and deleted outside the work dir).
Status archive_upper_layer(const SandboxStore& store, const SandboxRecord& record, Snapshot& snapshot) {
  LayerArchiveRequest request;
  request.upper = upper_dir(record.dir + "/root");
  request.archive_path = snapshot.layer_path();
  request.excluded = mount_points_of(store, record);
  nlohmann::json userns = record.spec.value("isolation", nlohmann::json::object()).value("user_namespace", nlohmann::json());
  if (userns.is_object()) {
    id_range_of(userns.value("uid_map", nlohmann::json()), &request.uid_base, &request.count);
    id_range_of(userns.value("gid_map", nlohmann::json()), &request.gid_base, &request.count);
  }
  auto archived = archive_layer(request);
  if (!archived) return Status(archived.status().code(), "cannot archive the root's upper layer: " + archived.status().message());
  snapshot.layer_sha256 = archived->sha256;
  snapshot.layer_size = archived->size;
  snapshot.size_bytes += archived->size;
  return Status::ok();
}

// A local snapshot: the work dir and, where the sandbox has one, its root's upper layer.
Status archive_local(const SandboxStore& store, const SandboxRecord& record, Snapshot& snapshot) {
  Status taken = archive_work_dir(record, snapshot);
  struct stat st {};
  if (taken && ::lstat(upper_dir(record.dir + "/root").c_str(), &st) == 0) taken = archive_upper_layer(store, record, snapshot);
  return taken;
}

}  // namespace

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
  std::error_code error;
  fs::create_directories(snapshots_dir(store), error);
  Snapshot snapshot;
  snapshot.name = name;
  snapshot.dir = snapshots_dir(store) + "/" + name;
  if (::mkdir(snapshot.dir.c_str(), 0700) != 0) {
    if (errno == EEXIST) return Status(ErrorCode::already_exists, "a snapshot named '" + name + "' exists already");
    return Status::from_errno(errno, "cannot create '" + snapshot.dir + "'");
  }
  snapshot.kind = record.backend == "local" ? "archive" : record.backend == "modal" ? "modal_image" : "image";
  snapshot.backend = record.backend;
  snapshot.source_id = record.id;
  snapshot.source_name = record.name;
  snapshot.spec = record.spec;
  for (const char* transient : {"relay", "container", "server_key", "limit_plan", "limits_enforced_by", "root_mount_points",
                                "modal_id", "modal", "modal_ended", "adopted_tags"}) {
    snapshot.spec.erase(transient);
  }
  snapshot.created_at = static_cast<double>(std::time(nullptr));
  Status taken = snapshot.kind == "image"         ? commit_container(record, snapshot)
                 : snapshot.kind == "modal_image" ? snapshot_modal(record, snapshot)
                                                  : archive_local(store, record, snapshot);
  if (taken) taken = write_private(snapshot.config_path(), record.spec.value("agent_config", nlohmann::json::object()).dump(2));
  if (taken) taken = write_private(snapshot.dir + "/snapshot.json", snapshot.to_json().dump(2) + "\n");
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
  if (snapshot.kind == "image" && !snapshot.image.empty()) {
    auto removed = run_engine(snapshot.backend, {"rmi", "--force", snapshot.image});
    if (removed && removed->status != 0 && removed->err.find("image not known") == std::string::npos &&
        removed->err.find("No such image") == std::string::npos) {
      return Status(ErrorCode::internal, snapshot.backend + " rmi " + snapshot.image + ": " + removed->error_line());
    }
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

Status restore_snapshot_layer(const Snapshot& snapshot, const std::string& upper, const harvest::LayerIds& ids) {
  std::uint64_t size = 0;
  auto sha256 = file_sha256(snapshot.layer_path(), &size);
  if (!sha256) return sha256.status();
  if (*sha256 != snapshot.layer_sha256) {
    return Status(ErrorCode::input_changed, "the upper layer's archive " + snapshot.layer_path() + " has sha256 " + *sha256 +
                                                "; the snapshot says " + snapshot.layer_sha256 + " (damaged or replaced)");
  }
  auto extracted = harvest::extract_layer(snapshot.layer_path(), upper, ids);
  if (!extracted) return Status(extracted.status().code(), "the upper layer: " + extracted.status().message());
  return Status::ok();
}

}  // namespace gpubox::host
