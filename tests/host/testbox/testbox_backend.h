// A backend that exists only in the host tests, built as a new backend is: a
// folder implementing Backend, its flags registered from there. In a build
// it would be one more line in host/backends/registry.cpp; the tests hand it
// to the registry-driven parts (create's flags and usage, --help) beside the
// registry's own. It creates nothing. Any thread.
#pragma once

#include "host/backends/backend.h"

namespace gpubox::host::testing {

// "testbox": defines --testbox-zone ZONE and the switch --testbox-spot, borrows --image.
const Backend& testbox_backend();

}  // namespace gpubox::host::testing
