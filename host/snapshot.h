// Snapshots of sandboxes, kept in STORE/snapshots/NAME/snapshot.json (mode
// 0600; never a secret value). A container's snapshot is its file system
// committed as an image (`ENGINE commit`, tag localhost/gpubox-snapshot:NAME):
// files and installed packages. A local sandbox's is its work dir staged as
// one tar + zstd archive with a sha256 manifest (base/stager.h, the
// jobs' own staging) beside the record, and its root's upper layer (what it
// installed, changed and deleted outside the work dir) as a second archive
// (host/backends/local/layer_archive.h) whose sha256 the record keeps; snapshots from before
// the layer was kept hold the work dir alone and restore so. Either keeps the sandbox's settings
// (limits, network, timeouts, mounts, env, secret *names*, its agent config
// without secrets); none keeps running processes. A backend whose sandboxes
// run on a control plane keeps an image there whose id the record holds
// (its folder's take_snapshot says how long). Taking, removing and restoring one by its backend:
// host/sandboxes/snapshots.h. One thread.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "host/sandbox_store.h"
#include "base/safe_extractor.h"
#include "base/status.h"

namespace gpubox::host {

struct Snapshot {
  std::string name;
  std::string kind;        // its backend's: "image" (podman, docker), "archive" (local), or another backend's own
  std::string backend;     // the source sandbox's
  std::string source_id;
  std::string source_name;
  std::string image;       // kind image: the committed image; a control plane's kind: the image id it keeps
  std::string dir;         // STORE/snapshots/NAME
  double created_at = 0;
  std::uint64_t size_bytes = 0;  // the archives', or the image's as the engine reports it
  // Kind archive: the upper layer's archive (empty sha256: none, a work-dir-only snapshot).
  std::string layer_sha256;
  std::uint64_t layer_size = 0;
  nlohmann::json spec = nlohmann::json::object();  // the source record's spec

  std::string archive_path() const { return dir + "/archive.tar.zst"; }
  std::string config_path() const { return dir + "/config.json"; }
  std::string layer_path() const { return dir + "/upper.tar.zst"; }
  bool has_layer() const { return !layer_sha256.empty(); }
  nlohmann::json to_json() const;
};

// STORE/snapshots: where each snapshot's dir is.
std::string snapshots_dir(const SandboxStore& store);

// Every snapshot, oldest first; by name.
std::vector<Snapshot> list_snapshots(const SandboxStore& store);
Result<Snapshot> find_snapshot(const SandboxStore& store, const std::string& name);
// Writes a file of a snapshot's dir atomically (temp file + rename, mode 0600).
Status write_private_file(const std::string& path, const std::string& text);


}  // namespace gpubox::host
