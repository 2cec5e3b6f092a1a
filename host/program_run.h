// Runs a program found on PATH (a container engine, a backend's SDK in
// Python, a tool in a test) and captures what it prints: no shell, the
// arguments go to posix_spawn as given, and no secret value is ever an
// argument (secrets travel on stdin or in files; see container_backend.h).
// One thread; forks.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "base/status.h"

namespace gpubox::host {

struct ProgramRun {
  int status = -1;  // the exit code, or 128 + signal
  std::string out;
  std::string err;
  // The last line of err without podman's or docker's "Error: " prefix, for messages.
  std::string error_line() const;
};

// Runs `program ARGS...` with stdin from /dev/null (or, with input, a pipe
// holding input, at most 64 KiB: how secrets reach a child without argv),
// waits up to timeout (then kills it: deadline_exceeded) and returns what it
// printed. invalid_request when the program is not on PATH. A non-zero exit is
// a result, not an error. fd3, when given, is the program's fd 3 (what
// `podman run --preserve-fds 1` hands to the container).
Result<ProgramRun> run_program(const std::string& program, const std::vector<std::string>& args,
                               std::chrono::milliseconds timeout = std::chrono::seconds(120),
                               const std::string* input = nullptr, int fd3 = -1);

// Runs `program ARGS...` with stdin from /dev/null and both its stdout and
// its stderr into this process's stdout, until it exits: its exit code, or
// 128 + signal. (`docker logs` prints the container's stderr on its stderr.)
Result<int> run_program_into_stdout(const std::string& program, const std::vector<std::string>& args);

// True when `program` names an executable on PATH.
bool program_on_path(const std::string& program);

}  // namespace gpubox::host
