// The Kubernetes backend's registration: sandboxes as agent-sandbox Sandboxes
// (or claims on a warm pool) of a cluster, reached at their pod's IP with
// CURVE (kubernetes_backend.h creates and ends them). Any thread.
#pragma once

#include "host/backends/backend.h"

namespace gpubox::host {

// The one KubernetesBackend ("kubernetes").
const Backend& kubernetes_backend();

}  // namespace gpubox::host
