// Taking, removing and replaying snapshots (host/snapshot.h keeps their
// records) through the backend each belongs to: the generic steps and what
// every backend's snapshot keeps here, each backend's own part behind
// Backend (take_snapshot, remove_snapshot, unsnapshotted_spec_keys,
// add_snapshot_create_args). One thread.
#pragma once

#include <string>
#include <vector>

#include "host/sandbox_store.h"
#include "host/snapshot.h"
#include "base/status.h"

namespace gpubox::host {

// Takes a snapshot of the sandbox under name (empty: SANDBOX-YYYYMMDD-HHMMSS).
// already_exists when the name is taken; invalid_request when it is malformed.
Result<Snapshot> take_snapshot(const SandboxStore& store, const SandboxRecord& record, const std::string& name);

// Removes the snapshot (and what its backend keeps of it elsewhere: a committed image).
Status remove_snapshot(const SandboxStore& store, const Snapshot& snapshot);

// The `gpubox create` arguments that recreate the snapshot's sandbox
// (--backend, limits, network, timeouts, mounts, --secret NAME for each
// secret, whose values come from the environment again, --config with its
// saved agent config, and its backend's own flags); flags the user adds after them win.
std::vector<std::string> snapshot_create_args(const Snapshot& snapshot);

}  // namespace gpubox::host
