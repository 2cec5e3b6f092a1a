// `gpubox rpc ENDPOINT METHOD [JSON]`: one call, printed as JSON.
#pragma once

#include <string>
#include <vector>

namespace gpubox::host {

// Returns the CLI exit code: 0 ok, 1 the call failed, 2 usage, 3 not reachable.
int run_rpc_command(const std::vector<std::string>& args);

}  // namespace gpubox::host
