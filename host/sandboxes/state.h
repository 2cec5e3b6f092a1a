// A sandbox's state and how it ended, as its backend tells them: the floor
// above the store (plain records) and the backends (host/backends/), so that
// neither reaches up for the other. Reads the record and what its backend
// keeps on this host (no network); any thread.
#pragma once

#include <string>

#include "host/sandbox_end.h"
#include "host/sandbox_store.h"

namespace gpubox::host {

// "running" when the agent lives, "dead" when it exited (or its pid now names
// another process), "creating" before the agent was started; for a backend
// whose sandboxes run elsewhere, what its control plane said last
// (Backend::state). A record of a backend this build lacks: as if its agent
// were a process of this host.
std::string sandbox_state(const SandboxRecord& record);

// REQUIRES: sandbox_state(record) == "dead". How it ended, as its backend says (Backend::end).
SandboxEnd sandbox_end(const SandboxRecord& record);

}  // namespace gpubox::host
