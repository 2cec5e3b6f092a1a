// `gpubox budget reconcile`: settles the reservations whose outcome gpubox
// does not know (a create that timed out talking to a control plane, a CLI
// killed between reserve and confirm). For each open reservation it looks for
// the sandbox: in the store, then on its backend's control plane by the
// gpubox.reservation tag (Backend::list_remote, as `ls --remote`). A sandbox
// still running keeps its reservation (and a stranded record learns its
// remote id, Backend::link_remote_id, so that
// `gpubox terminate` ends and settles it); one that is nowhere is settled for
// at most the time that passed between its reserve and its failure (or now).
// It never creates, retries or ends a sandbox. Above backends/ and budget/,
// as it reads both. One thread.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "host/sandbox_store.h"
#include "base/status.h"

namespace gpubox::host {

// What reconcile did: {"reservations": [{reservation, budget, action, detail}], "errors": [...]};
// action: live, settled, linked, left (the control plane could not be asked).
Result<nlohmann::json> reconcile_reservations(const SandboxStore& store);

}  // namespace gpubox::host
