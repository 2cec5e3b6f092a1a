// A local sandbox's snapshot: its work dir staged as one tar + zstd archive
// with a sha256 manifest (the jobs' own stager), and its root's upper layer
// (what it installed, changed and deleted outside the work dir) as a second
// archive (layer_archive.h) whose sha256 the snapshot keeps. One thread.
#pragma once

#include "host/sandbox_store.h"
#include "host/snapshot.h"
#include "base/status.h"

namespace gpubox::host {

// Sets snapshot.kind to "archive" and writes the archives into snapshot.dir.
Status snapshot_local_sandbox(const SandboxStore& store, const SandboxRecord& record, Snapshot& snapshot);

// Puts the snapshot's work dir archive into a new sandbox's work dir, checked
// against its manifest (the upper layer went in before its root was mounted).
Status restore_work_dir(const Snapshot& snapshot, const SandboxRecord& record);

// Extracts an archive snapshot's upper layer at upper (which must not exist)
// with the hardened extractor (extract_layer), once its sha256 matches the
// record's: for LocalSandboxSpec::seed_upper, before the overlay is mounted.
// On any failure nothing is left at upper.
Status restore_snapshot_layer(const Snapshot& snapshot, const std::string& upper, const harvest::LayerIds& ids);

}  // namespace gpubox::host
