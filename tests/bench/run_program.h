// Runs a program for a benchmark, timing it: one place for the fork, exec and
// capture that the CLI and container benches share.
#pragma once

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

namespace gpubox::bench {

// Runs argv (a path, or a name found on PATH), capturing its stdout into *out and
// its wall time into *ms; returns its exit status (-1 when it did not exit).
inline int run_program(const std::vector<std::string>& args, std::string* out = nullptr, double* ms = nullptr) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) std::exit(1);
  std::vector<char*> argv;
  for (const auto& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  auto begin = std::chrono::steady_clock::now();
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  char buffer[4096];
  ssize_t n;
  while ((n = ::read(fds[0], buffer, sizeof buffer)) > 0) {
    if (out) out->append(buffer, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
  }
  if (ms) *ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace gpubox::bench
