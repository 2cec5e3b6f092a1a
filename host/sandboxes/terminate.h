// Ending a sandbox of any backend and settling what its budget held: the one
// lifecycle step that touches both backends/ and budget/, so it sits above
// them. One thread; blocks on the backend's stop and the budget's journal.
#pragma once

#include <chrono>

#include "host/sandbox_store.h"
#include "base/status.h"

namespace gpubox::host {

// Stops the sandbox and removes its state (Backend::terminate of its record's
// backend), then settles its budget's reservations once its end is certain;
// invalid_request for a backend this build lacks. *killed: it had to be killed.
Status terminate_sandbox(const SandboxStore& store, const SandboxRecord& record, std::chrono::milliseconds grace,
                         bool* killed = nullptr);

}  // namespace gpubox::host
