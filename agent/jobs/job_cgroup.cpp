#include "agent/jobs/job_cgroup.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <fstream>
#include <sstream>

namespace gpubox::jobs {
namespace {

// The agent's cgroup paths: v1 memory hierarchy and v2 unified, from /proc/self/cgroup.
void own_cgroups(std::string* v1_memory, std::string* v2) {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    auto first = line.find(':');
    auto second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    std::string controllers = line.substr(first + 1, second - first - 1);
    std::string path = line.substr(second + 1);
    std::stringstream list(controllers);
    std::string name;
    while (std::getline(list, name, ',')) {
      if (name == "memory") *v1_memory = path;
    }
    if (line.rfind("0::", 0) == 0) *v2 = path;
  }
}

bool write_text(const std::string& path, const std::string& text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace

std::unique_ptr<JobCgroup> JobCgroup::create(const std::string& job_id, std::optional<std::uint64_t> memory_limit) {
  std::unique_ptr<JobCgroup> group(new JobCgroup());
  std::string v1, v2;
  own_cgroups(&v1, &v2);
  std::string v1_parent = "/sys/fs/cgroup/memory" + v1;
  if (!v1.empty() && exists(v1_parent + "/memory.oom_control")) {
    // Job ids repeat across agents (every sandbox has a job-1): a random suffix keeps cgroups apart.
    char suffix[16];
    std::snprintf(suffix, sizeof suffix, "-%08x", static_cast<unsigned>(std::random_device{}()));
    std::string dir = v1_parent + (v1_parent.back() == '/' ? "" : "/") + "gpubox-" + job_id + suffix;
    if (::mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST) {
      group->own_dir_ = dir;
      group->counter_file_ = dir + "/memory.oom_control";
      group->evidence_ = "the oom_kill counter of the job's own cgroup (v1 memory.oom_control) rose";
      if (memory_limit) {
        group->limited_ = write_text(dir + "/memory.limit_in_bytes", std::to_string(*memory_limit));
        if (!group->limited_) group->limit_error_ = std::string("cannot set memory.limit_in_bytes: ") + std::strerror(errno);
        // Memory plus swap too, where swap accounting exists: otherwise the job swaps instead of meeting the limit.
        if (group->limited_ && exists(dir + "/memory.memsw.limit_in_bytes")) {
          write_text(dir + "/memory.memsw.limit_in_bytes", std::to_string(*memory_limit));
        }
      }
    } else {
      group->counter_file_ = v1_parent + "/memory.oom_control";
      group->evidence_ = "the oom_kill counter of the agent's cgroup (v1 memory.oom_control) rose";
    }
  } else {
    std::string events = "/sys/fs/cgroup" + v2 + (v2 == "/" ? "" : "/") + "memory.events";
    if (!v2.empty() && exists(events)) {
      group->counter_file_ = events;
      group->evidence_ = "the oom_kill counter of the agent's cgroup (v2 memory.events) rose";
    }
  }
  if (memory_limit && !group->limited_ && group->limit_error_.empty()) {
    group->limit_error_ = "no cgroup v1 memory hierarchy the agent may create a job cgroup in";
  }
  if (auto counter = group->read_counter()) group->baseline_ = *counter;
  return group;
}

JobCgroup::~JobCgroup() {
  if (own_dir_.empty()) return;
  // Processes SIGKILLed a moment ago may still be leaving: EBUSY until they have.
  for (int attempt = 0; attempt < 50; ++attempt) {
    if (::rmdir(own_dir_.c_str()) == 0 || errno != EBUSY) return;
    ::usleep(10'000);
  }
}

bool JobCgroup::remove_leftover(const std::string& dir) {
  if (dir.rfind("/sys/fs/cgroup/", 0) != 0 || dir.find("/gpubox-job-") == std::string::npos) return false;
  return ::rmdir(dir.c_str()) == 0 || errno == ENOENT;
}

bool JobCgroup::add(pid_t pid) {
  if (own_dir_.empty()) return false;
  return write_text(own_dir_ + "/cgroup.procs", std::to_string(pid));
}

std::optional<std::uint64_t> JobCgroup::read_counter() const {
  if (counter_file_.empty()) return std::nullopt;
  std::ifstream in(counter_file_);
  std::string key;
  std::uint64_t value = 0;
  while (in >> key >> value) {
    if (key == "oom_kill") return value;
  }
  return std::nullopt;
}

std::optional<std::uint64_t> JobCgroup::oom_kills_since_start() const {
  auto now = read_counter();
  if (!now) return std::nullopt;
  return *now >= baseline_ ? *now - baseline_ : 0;
}

}  // namespace gpubox::jobs
