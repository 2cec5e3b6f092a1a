// The Modal backend's registration: sandboxes as Modal Sandboxes, reached
// through a CURVE-secured raw TCP tunnel (modal_backend.h creates and ends
// them). Any thread.
#pragma once

#include "host/backends/backend.h"

namespace gpubox::host {

// The one ModalBackend ("modal").
const Backend& modal_backend();

}  // namespace gpubox::host
