#include "tests/support/host_processes.h"

#include <dirent.h>

#include <cstdlib>

#include "tests/support/test_files.h"

namespace gpubox::testing {

std::vector<ProcessInfo> list_processes() {
  std::vector<ProcessInfo> processes;
  DIR* proc = ::opendir("/proc");
  if (!proc) return processes;
  while (dirent* entry = ::readdir(proc)) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    std::string stat = read_file(std::string("/proc/") + entry->d_name + "/stat");
    // "pid (comm) S ppid ...": comm may hold spaces and parentheses.
    size_t open = stat.find('(');
    size_t close = stat.rfind(')');
    if (open == std::string::npos || close == std::string::npos || close + 4 > stat.size()) continue;
    ProcessInfo info;
    info.pid = std::atoi(stat.c_str());
    info.comm = stat.substr(open + 1, close - open - 1);
    info.state = stat[close + 2];
    info.ppid = std::atoi(stat.c_str() + close + 4);
    processes.push_back(std::move(info));
  }
  ::closedir(proc);
  return processes;
}

std::vector<ProcessInfo> children_of(pid_t parent) {
  std::vector<ProcessInfo> children;
  for (auto& p : list_processes()) {
    if (p.ppid == parent) children.push_back(std::move(p));
  }
  return children;
}

int count_zombie_children(pid_t parent) {
  int zombies = 0;
  for (const auto& p : children_of(parent)) zombies += p.state == 'Z' ? 1 : 0;
  return zombies;
}

}  // namespace gpubox::testing
