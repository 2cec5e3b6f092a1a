#include "host/sandboxes/state.h"

#include "host/backends/registry.h"

namespace gpubox::host {

std::string sandbox_state(const SandboxRecord& record) {
  const Backend* backend = find_backend(record.backend);
  return backend ? backend->state(record) : state_of_agent_process(record);
}

SandboxEnd sandbox_end(const SandboxRecord& record) {
  const Backend* backend = find_backend(record.backend);
  return backend ? backend->end(record) : sandbox_end_on_host(record);
}

}  // namespace gpubox::host
