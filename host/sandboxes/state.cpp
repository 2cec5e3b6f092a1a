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

std::string control_plane_of(const SandboxRecord& record) {
  const Backend* backend = find_backend(record.backend);
  const ControlPlane* plane = backend ? backend->control_plane() : nullptr;
  return plane ? plane->name : "";
}

Status refresh_sandbox_state(const SandboxStore& store, SandboxRecord* record) {
  const Backend* backend = find_backend(record->backend);
  if (!backend || !backend->state_is_remote()) return Status::ok();
  return backend->refresh_states(store, {record});
}

std::vector<std::pair<std::string, Status>> refresh_sandbox_states(const SandboxStore& store,
                                                                   const std::vector<SandboxRecord*>& records) {
  std::vector<std::pair<std::string, Status>> failed;
  for (const Backend* backend : all_backends()) {
    Status refreshed = backend->refresh_states(store, records);
    if (!refreshed) failed.emplace_back(backend->control_plane() ? backend->control_plane()->name : backend->name(), refreshed);
  }
  return failed;
}

}  // namespace gpubox::host
