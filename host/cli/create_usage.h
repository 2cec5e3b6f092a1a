// `gpubox create --help`, built from the backends: the common synopsis, each
// backend's own (Backend::create_synopsis), then what the options mean, the
// common ones and each backend's (create_options_help). One thread.
#pragma once

#include <string>
#include <vector>

#include "host/backends/backend.h"
#include "host/cli/help_lines.h"

namespace gpubox::host::cli {

// "local|podman|docker": the names --backend takes, in registration order.
std::string backend_choices(const std::vector<const Backend*>& backends);

// create's entry of `gpubox --help`, naming these backends.
HelpLine create_help(const std::vector<const Backend*>& backends);

// The whole usage of `gpubox create` with these backends (the registry's, or a test's).
std::string create_usage(const std::vector<const Backend*>& backends);

}  // namespace gpubox::host::cli
