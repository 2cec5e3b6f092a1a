#include "host/backends/registry.h"

#include "host/backends/container/container.h"
#include "host/backends/kubernetes/kubernetes.h"
#include "host/backends/local/local.h"
#include "host/backends/modal/modal.h"

namespace gpubox::host {

const std::vector<const Backend*>& all_backends() {
  // The registrations, one a backend (podman and docker: one folder, two engines).
  static const std::vector<const Backend*> backends = {
      &local_backend(),
      &podman_backend(),
      &docker_backend(),
      &modal_backend(),
      &kubernetes_backend(),
  };
  return backends;
}

const Backend* find_backend(const std::string& name) {
  for (const Backend* backend : all_backends()) {
    if (backend->name() == name) return backend;
  }
  return nullptr;
}

std::string backend_names_text() {
  const auto& backends = all_backends();
  std::string text;
  for (std::size_t i = 0; i < backends.size(); ++i) {
    text += (i == 0 ? "" : i + 1 == backends.size() ? " and " : ", ") + backends[i]->name();
  }
  return text;
}

Result<const Backend*> backend_named(const std::string& name) {
  if (const Backend* backend = find_backend(name)) return backend;
  return Status(ErrorCode::invalid_request, "'" + name + "' is not available; this build has " + backend_names_text());
}

std::vector<const Backend*> control_plane_backends() {
  std::vector<const Backend*> planes;
  for (const Backend* backend : all_backends()) {
    if (backend->control_plane()) planes.push_back(backend);
  }
  return planes;
}

Result<const Backend*> control_plane_backend(const std::string& name) {
  for (const Backend* backend : control_plane_backends()) {
    if (name.empty() || backend->name() == name) return backend;
  }
  if (!name.empty() && find_backend(name)) {
    return Status(ErrorCode::invalid_request, "--backend " + name + ": its sandboxes run on this host, with no control plane to ask");
  }
  return Status(ErrorCode::invalid_request, name.empty() ? "this build has no backend with a control plane (it has " + backend_names_text() + ")"
                                                         : "--backend: '" + name + "' is not available; this build has " + backend_names_text());
}

Result<const Backend*> backend_of(const SandboxRecord& record) {
  auto backend = backend_named(record.backend);
  if (!backend) return Status(ErrorCode::invalid_request, "sandbox " + record.id + ": backend " + backend.status().message());
  return backend;
}

}  // namespace gpubox::host
