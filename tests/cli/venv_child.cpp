#include "tests/cli/venv_child.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <thread>

#if !defined(GPUBOX_VENV_PYTHON) || !defined(GPUBOX_PYTHON_DIR)
#error "GPUBOX_VENV_PYTHON and GPUBOX_PYTHON_DIR must be defined"
#endif

namespace gpubox::testing {

pid_t start_venv_python(const std::string& dir, const std::string& log, const std::vector<std::string>& args,
                        const std::map<std::string, std::string>& env) {
  std::vector<std::string> strings = {GPUBOX_VENV_PYTHON};
  strings.insert(strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : strings) argv.push_back(s.data());
  argv.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid != 0) return pid;
  // A test process killed by ctest's timeout would otherwise leave the child's containers running.
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::chdir(dir.c_str()) != 0) ::_exit(127);
  if (std::freopen(log.c_str(), "w", stdout)) ::dup2(STDOUT_FILENO, STDERR_FILENO);
  ::setenv("PYTHONDONTWRITEBYTECODE", "1", 1);
  for (const auto& [name, value] : env) ::setenv(name.c_str(), value.c_str(), 1);
  ::execv(argv[0], argv.data());
  ::_exit(127);
}

void end_child(pid_t pid, std::chrono::seconds patience) {
  ::kill(pid, SIGTERM);
  auto give_up = std::chrono::steady_clock::now() + patience;
  int status = 0;
  pid_t got = 0;
  // The test process is a subreaper that reaps orphans; ECHILD means someone reaped the child already.
  while ((got = ::waitpid(pid, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (got == 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
}

std::map<std::string, std::string> venv_python_environment() {
  const char* current = std::getenv("PYTHONPATH");
  return {{"GPUBOX_PYTHON", GPUBOX_VENV_PYTHON},
          {"PYTHONDONTWRITEBYTECODE", "1"},
          {"PYTHONPATH", std::string(GPUBOX_PYTHON_DIR) + (current && *current ? std::string(":") + current : "")}};
}

}  // namespace gpubox::testing
