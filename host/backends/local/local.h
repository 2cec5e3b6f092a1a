// The local backend's registration: sandboxes in namespaces and cgroups of
// this host (local_backend.h creates and ends them). Any thread.
#pragma once

#include "host/backends/backend.h"

namespace gpubox::host {

// The one LocalBackend ("local").
const Backend& local_backend();

}  // namespace gpubox::host
