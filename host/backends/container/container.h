// The podman and docker backends' registration: sandboxes as containers of
// an engine on PATH (container_backend.h creates and ends them). Any thread.
#pragma once

#include <string>

#include "host/backends/backend.h"

namespace gpubox::host {

// The ContainerBackend of each engine, named after it.
const Backend& podman_backend();
const Backend& docker_backend();

}  // namespace gpubox::host
