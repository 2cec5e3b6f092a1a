// The registry: every backend this build has, by name, in the order `gpubox
// create --help` lists them. Each is registered once, in registry.cpp; adding
// a backend is its folder (its sources in its sources.cmake) and one line
// there. Any thread.
#pragma once

#include <string>
#include <vector>

#include "host/backends/backend.h"
#include "host/sandbox_store.h"
#include "base/status.h"

namespace gpubox::host {

// Every backend, in registration order.
const std::vector<const Backend*>& all_backends();
// The backend of that name, or nullptr.
const Backend* find_backend(const std::string& name);
// The backend of that name; invalid_request naming the known ones otherwise
// ("'kubernetes' is not available; this build has local, podman and docker").
Result<const Backend*> backend_named(const std::string& name);
// The backends whose sandboxes run on a control plane that lists and adopts them (`gpubox ls
// --remote`, `gpubox adopt`), in registration order.
std::vector<const Backend*> control_plane_backends();
// The one named so ("": the first of them); invalid_request when it has no control plane or this build none.
Result<const Backend*> control_plane_backend(const std::string& name = "");
// The backend a record was created with; invalid_request as above, prefixed by the sandbox's id.
Result<const Backend*> backend_of(const SandboxRecord& record);
// "local, podman and docker": every name, in registration order.
std::string backend_names_text();

}  // namespace gpubox::host
