// Resource limits of a local sandbox: CPU, memory and pids through cgroup v2
// where the controller is available there, cgroup v1 otherwise (hybrid hosts
// mount both), and rlimits as the last resort. prepare_limits() runs in the
// CLI before the agent starts; the agent's set-up code then joins the
// prepared cgroups and applies the rlimits before it execs. Any thread.
#pragma once

#include <sys/resource.h>

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace gpubox::host {

struct ResourceLimits {
  double cpus = 0;              // CPU time as a number of CPUs; 0 = unlimited
  std::uint64_t memory_mib = 0; // 0 = unlimited
  std::uint64_t pids = 0;       // 0 = unlimited
};

// What prepare_limits made, and how each limit is enforced.
struct LimitPlan {
  std::vector<std::string> cgroup_dirs;   // created, to be removed at terminate (deepest last)
  // The agent joins each (written by the CLI). Each sits in the sandbox's own
  // cgroup, a child "sandbox" of the gpubox-ID cgroup that holds the limits.
  std::vector<std::string> procs_files;
  std::vector<std::pair<int, rlim_t>> rlimits;  // applied in the agent before exec
  // "cpu" / "memory" / "pids" → "cgroup v2", "cgroup v1", "rlimit (RLIMIT_AS)" or "not enforced".
  std::map<std::string, std::string> enforced_by;
  std::string memory_cgroup;  // the sandbox's own memory cgroup (below the limit), for OOM counts and usage; may be empty
  std::string memory_version; // "v1", "v2" or ""

  nlohmann::json to_json() const;
  static LimitPlan from_json(const nlohmann::json& json);
};

// Creates the sandbox's cgroups (named gpubox-ID) and writes their limits. On
// failure removes whatever it created.
Result<LimitPlan> prepare_limits(const std::string& id, const ResourceLimits& limits);

// Removes the plan's cgroups, waiting (bounded) while processes still leave them.
Status remove_cgroups(const LimitPlan& plan);

// The number of OOM kills in the sandbox's memory cgroup; -1 when unknown.
long long oom_kill_count(const LimitPlan& plan);
// Memory in use by the sandbox's memory cgroup, in bytes; -1 when unknown.
long long memory_usage_bytes(const LimitPlan& plan);

}  // namespace gpubox::host
