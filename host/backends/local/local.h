// The local backend's registration: sandboxes in namespaces and cgroups of
// this host (local_backend.h creates and ends them). Any thread.
#pragma once

#include "host/backends/backend.h"

namespace gpubox::host {

// The one LocalBackend ("local").
const Backend& local_backend();

// What `info` and `usage` show of a sandbox whose agent is a process of this
// host (local, podman, docker): its pid and network, its image if any.
std::vector<InfoLine> describe_host_process(const SandboxRecord& record);
void add_requested_on_host(const SandboxRecord& record, nlohmann::json* requested);
// The seccomp line of `info`: "default" is what the backend names its own
// default profile; a sandbox created unconfined gets a warning.
InfoLine seccomp_line(const SandboxRecord& record, const std::string& default_text);

}  // namespace gpubox::host
