// `gpubox-agent kernel -f CONNECTION_FILE`: the Jupyter kernel on its own, for
// development and conformance tests (inside a sandbox the agent runs it).
#pragma once

#include <string>

namespace gpubox::kernel {

struct StandaloneKernelOptions {
  std::string connection_file;
  std::string python = "python3";
  std::string mode;  // "" or "plain"
};

// Serves the kernel until a shutdown_request or SIGTERM. REQUIRES: signals
// blocked in the calling thread (main does that first). Returns the exit status.
int run_standalone_kernel(const StandaloneKernelOptions& options);

}  // namespace gpubox::kernel
