// Snapshots of sandboxes, kept in STORE/snapshots/NAME/snapshot.json (mode
// 0600; never a secret value). A container's snapshot is its file system
// committed as an image (`ENGINE commit`, tag localhost/gpubox-snapshot:NAME):
// files and installed packages. A local sandbox's is its work dir staged as
// one tar + zstd archive with a sha256 manifest (agent/jobs/stager.h, the
// jobs' own staging) beside the record. Either keeps the sandbox's settings
// (limits, network, timeouts, mounts, env, secret *names*, its agent config
// without secrets); none keeps running processes. One thread.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "host/sandbox_store.h"
#include "rpc/status.h"

namespace gpubox::host {

struct Snapshot {
  std::string name;
  std::string kind;        // "image" (podman, docker) or "archive" (local)
  std::string backend;     // the source sandbox's
  std::string source_id;
  std::string source_name;
  std::string image;       // kind image: the committed image
  std::string dir;         // STORE/snapshots/NAME
  double created_at = 0;
  std::uint64_t size_bytes = 0;  // the archive's, or the image's as the engine reports it
  nlohmann::json spec = nlohmann::json::object();  // the source record's spec

  std::string archive_path() const { return dir + "/archive.tar.zst"; }
  std::string config_path() const { return dir + "/config.json"; }
  nlohmann::json to_json() const;
};

// Takes a snapshot of the sandbox under name (empty: SANDBOX-YYYYMMDD-HHMMSS).
// already_exists when the name is taken; invalid_request when it is malformed.
Result<Snapshot> take_snapshot(const SandboxStore& store, const SandboxRecord& record, const std::string& name);

// Every snapshot, oldest first; by name.
std::vector<Snapshot> list_snapshots(const SandboxStore& store);
Result<Snapshot> find_snapshot(const SandboxStore& store, const std::string& name);
// Removes the snapshot (and its committed image).
Status remove_snapshot(const SandboxStore& store, const Snapshot& snapshot);

// The `gpubox create` arguments that recreate the snapshot's sandbox
// (--backend, --image, limits, network, timeouts, mounts, --secret NAME for
// each secret, whose values come from the environment again, and --config
// with its saved agent config); flags the user adds after them win.
std::vector<std::string> snapshot_create_args(const Snapshot& snapshot);

// Puts an archive snapshot's files into a new local sandbox's work dir,
// checked against the manifest. Image snapshots need nothing: the image holds them.
Status restore_snapshot_files(const Snapshot& snapshot, const SandboxRecord& record);

}  // namespace gpubox::host
