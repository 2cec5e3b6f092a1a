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

}  // namespace gpubox::host
