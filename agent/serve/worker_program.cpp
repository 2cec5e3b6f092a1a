#include "agent/serve/worker_program.h"

namespace gpubox::serve {

std::string worker_program() {
  static const std::string program =
      embedded_package_code("gpubox_serve_worker", "<gpubox-serve-worker>", worker_package_sources()) +
      "from gpubox_serve_worker.__main__ import main\n"
      "main()\n";
  return program;
}

}  // namespace gpubox::serve
