// The host's view of processes (the caller's /proc): what a test checks about
// the agent's children and zombies from outside. Plain functions, any thread.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace gpubox::testing {

struct ProcessInfo {
  pid_t pid = 0;
  pid_t ppid = 0;
  char state = '?';
  std::string comm;
};

// Every process in the caller's PID namespace.
std::vector<ProcessInfo> list_processes();
std::vector<ProcessInfo> children_of(pid_t parent);
int count_zombie_children(pid_t parent);

}  // namespace gpubox::testing
