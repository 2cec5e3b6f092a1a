#include "host/backends/local/local_snapshot.h"

#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <filesystem>

#include "host/backends/backend.h"
#include "host/backends/local/layer_archive.h"
#include "host/backends/local/sandbox_root.h"
#include "base/safe_extractor.h"
#include "base/stager.h"

namespace gpubox::host {
namespace {

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
  return write_private_file(snapshot.dir + "/manifest.json", outcome.manifest.to_json().dump(2) + "\n");
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

}  // namespace

Status snapshot_local_sandbox(const SandboxStore& store, const SandboxRecord& record, Snapshot& snapshot) {
  snapshot.kind = "archive";
  Status taken = archive_work_dir(record, snapshot);
  struct stat st {};
  if (taken && ::lstat(upper_dir(record.dir + "/root").c_str(), &st) == 0) taken = archive_upper_layer(store, record, snapshot);
  return taken;
}

Status restore_work_dir(const Snapshot& snapshot, const SandboxRecord& record) {
  std::ifstream in(snapshot.dir + "/manifest.json");
  auto manifest = nlohmann::json::parse(in, nullptr, false);
  if (!in || manifest.is_discarded()) return Status(ErrorCode::internal, "snapshot " + snapshot.name + ": its manifest is unreadable");
  std::string staging = record.work_dir() + "/.gpubox-restore";
  auto extracted = harvest::extract_archive(snapshot.archive_path(), staging);
  if (!extracted) return extracted.status();
  Status checked = harvest::verify_manifest(staging, manifest);
  std::error_code error;
  if (checked) {
    for (const auto& entry : std::filesystem::directory_iterator(staging + "/out", error)) {
      std::filesystem::rename(entry.path(), std::filesystem::path(record.work_dir()) / entry.path().filename(), error);
      if (error) break;
    }
    if (error) checked = Status(ErrorCode::internal, "restoring the work dir: " + error.message());
  }
  std::filesystem::remove_all(staging, error);
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
