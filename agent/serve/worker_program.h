// The serve worker's program: the package agent/serve/worker/ with
// python/gpubox's tensor_wire.py and _msgpack.py, embedded in the agent
// (cmake/EmbedPython.cmake) and sent to each new worker to run, so the image
// needs neither the worker nor gpubox installed. Plain functions; any thread.
#pragma once

#include <string>

#include "base/embedded_python.h"

namespace gpubox::serve {

// The embedded modules (generated): (module name, source), "__init__" and "__main__" included.
const EmbeddedSources& worker_package_sources();

// Python text that makes the package importable as gpubox_serve_worker (its
// files named <gpubox-serve-worker>/MODULE.py, which the worker leaves out of
// tracebacks) and runs its main(): serving on fd 3 until the agent closes it.
std::string worker_program();

}  // namespace gpubox::serve
