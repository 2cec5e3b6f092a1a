// What `info` and `usage` show of a sandbox whose agent is a process of this
// host, shared by the backends that run one (local/, container/) so that
// neither folder includes the other. Reads the record only; any thread.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "host/backends/backend.h"

namespace gpubox::host {

// Its agent's pid and network, its image and container if any.
std::vector<InfoLine> describe_host_process(const SandboxRecord& record);
// Adds its pids limit, idle timeout and GPUs to `usage`'s requested resources.
void add_requested_on_host(const SandboxRecord& record, nlohmann::json* requested);
// The seccomp line of `info`: "default" is what the backend names its own
// default profile; a sandbox created unconfined gets a warning.
InfoLine seccomp_line(const SandboxRecord& record, const std::string& default_text);

}  // namespace gpubox::host
