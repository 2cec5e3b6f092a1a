#include "agent/serve/worker_program.h"

namespace gpubox::serve {

std::string worker_program() {
  static const std::string program =
      embedded_package_program("gpubox_serve_worker", "<gpubox-serve-worker>", worker_package_sources());
  return program;
}

}  // namespace gpubox::serve
