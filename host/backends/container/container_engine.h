// Runs a container engine's command line (podman or docker, found on PATH)
// and captures what it prints: no shell, the arguments go to execvp as given,
// and nothing here is ever passed a secret value (they travel in files; see
// container_backend.h). One thread; forks.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "base/status.h"

namespace gpubox::host {

struct EngineRun {
  int status = -1;  // the exit code, or 128 + signal
  std::string out;
  std::string err;
  // The last line of err without the engine's "Error: " prefix, for messages.
  std::string error_line() const;
};

// Runs `engine ARGS...` with stdin from /dev/null (or, with input, a pipe
// holding input, at most 64 KiB: how secrets reach a child without argv),
// waits up to timeout (then kills it: deadline_exceeded) and returns what it
// printed. invalid_request when the engine is not on PATH. A non-zero exit is
// a result, not an error. Any program may be run this way (the Modal backend's Python).
Result<EngineRun> run_engine(const std::string& engine, const std::vector<std::string>& args,
                             std::chrono::milliseconds timeout = std::chrono::seconds(120),
                             const std::string* input = nullptr);

// True when `engine` names an executable on PATH.
bool engine_on_path(const std::string& engine);

}  // namespace gpubox::host
