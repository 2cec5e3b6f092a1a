// The suite's stand-ins for a backend's control plane (the fake Modal, the
// Kubernetes test cluster) are Python programs run with build/venv's python
// as children of the test process: starting one, ending one, and the
// environment that gpubox's Python side needs to reach them.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace gpubox::testing {

// Starts `build/venv/bin/python ARGS...` in directory dir with stdout and stderr
// into log and env added; its pid (it gets SIGTERM should this process die first).
pid_t start_venv_python(const std::string& dir, const std::string& log, const std::vector<std::string>& args,
                        const std::map<std::string, std::string>& env = {});
// SIGTERM to pid, then waits up to patience for it to exit (SIGKILL after).
void end_child(pid_t pid, std::chrono::seconds patience);
// GPUBOX_PYTHON (build/venv's python), PYTHONPATH (gpubox's python/ first) and no bytecode written.
std::map<std::string, std::string> venv_python_environment();

}  // namespace gpubox::testing
