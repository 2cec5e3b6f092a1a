// A sandbox's state and how it ended, as its backend tells them: the floor
// above the store (plain records) and the backends (host/backends/), so that
// neither reaches up for the other. sandbox_state and sandbox_end read the
// record and what its backend keeps on this host (no network); the refreshes
// ask a control plane and save what it says. Any thread, one record per thread.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "host/sandbox_end.h"
#include "host/sandbox_store.h"
#include "base/status.h"

namespace gpubox::host {

// "running" when the agent lives, "dead" when it exited (or its pid now names
// another process), "creating" before the agent was started; for a backend
// whose sandboxes run elsewhere, what its control plane said last
// (Backend::state). A record of a backend this build lacks: as if its agent
// were a process of this host.
std::string sandbox_state(const SandboxRecord& record);

// REQUIRES: sandbox_state(record) == "dead". How it ended, as its backend says (Backend::end).
SandboxEnd sandbox_end(const SandboxRecord& record);

// The name of the control plane the record's sandbox runs on ("" : this host, or a backend this build lacks).
std::string control_plane_of(const SandboxRecord& record);

// Asks the control plane of the record's backend, when it has one, and saves
// the record when it reports the sandbox ended; ok when there is none to ask.
Status refresh_sandbox_state(const SandboxStore& store, SandboxRecord* record);

// The same for many records, one call for each backend's own: the control
// planes that could not be asked, each with why.
std::vector<std::pair<std::string, Status>> refresh_sandbox_states(const SandboxStore& store,
                                                                   const std::vector<SandboxRecord*>& records);

}  // namespace gpubox::host
