#include "host/resource_limits.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

namespace gpubox::host {
namespace {

// The cgroup below gpubox-ID that holds the sandbox's processes.
constexpr char kSandboxCgroup[] = "sandbox";

// The address space gpubox-agent itself reserves (thread stacks, ZeroMQ), with headroom.
constexpr std::uint64_t kMinAddressSpaceMib = 256;

struct Hierarchies {
  std::string v2_root;                         // the cgroup2 mount, or ""
  std::map<std::string, std::string> v1_root;  // controller → its v1 mount
  std::map<std::string, std::string> v1_path;  // controller → this process's cgroup in it
};

Hierarchies find_hierarchies() {
  Hierarchies found;
  std::ifstream mounts("/proc/self/mounts");
  for (std::string line; std::getline(mounts, line);) {
    std::istringstream fields(line);
    std::string device, point, type, options;
    fields >> device >> point >> type >> options;
    if (type == "cgroup2" && found.v2_root.empty()) found.v2_root = point;
    if (type != "cgroup") continue;
    std::istringstream list(options);
    for (std::string option; std::getline(list, option, ',');) {
      if (option == "memory" || option == "cpu" || option == "pids") found.v1_root.emplace(option, point);
    }
  }
  std::ifstream groups("/proc/self/cgroup");
  for (std::string line; std::getline(groups, line);) {
    auto first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    std::istringstream list(line.substr(first + 1, second - first - 1));
    for (std::string controller; std::getline(list, controller, ',');) {
      found.v1_path[controller] = line.substr(second + 1);
    }
  }
  return found;
}

bool write_cgroup_file(const std::string& path, const std::string& text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}

std::string read_cgroup_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

bool has_word(const std::string& text, const std::string& word) {
  std::istringstream words(text);
  for (std::string w; words >> w;) {
    if (w == word) return true;
  }
  return false;
}

// Creates dir (and records it) unless it exists.
bool make_cgroup(const std::string& dir, LimitPlan& plan) {
  if (::mkdir(dir.c_str(), 0755) == 0) {
    plan.cgroup_dirs.push_back(dir);
    return true;
  }
  return errno == EEXIST;
}

// The per-controller settings, as (file, value) for v2 and for v1.
std::vector<std::pair<std::string, std::string>> settings(const std::string& controller, const ResourceLimits& limits,
                                                          bool v2) {
  constexpr long kPeriodUs = 100'000;
  if (controller == "memory") {
    if (limits.memory_mib == 0) return {};  // accounted only: what info and usage report is the sandbox's own
    std::string bytes = std::to_string(limits.memory_mib << 20);
    if (v2) return {{"memory.max", bytes}, {"memory.swap.max", "0"}};
    return {{"memory.limit_in_bytes", bytes}};
  }
  if (controller == "cpu") {
    std::string quota = std::to_string(std::lround(limits.cpus * kPeriodUs));
    if (v2) return {{"cpu.max", quota + " " + std::to_string(kPeriodUs)}};
    return {{"cpu.cfs_period_us", std::to_string(kPeriodUs)}, {"cpu.cfs_quota_us", quota}};
  }
  return {{"pids.max", std::to_string(limits.pids)}};
}

// cgroup v2: ROOT/gpubox/gpubox-ID with the controller enabled down the path.
// The root is exempt from the no-internal-processes rule, and ROOT/gpubox
// holds no process, so both may delegate controllers.
bool try_v2(const Hierarchies& found, const std::string& id, const std::string& controller,
            const ResourceLimits& limits, LimitPlan& plan, std::string& dir) {
  if (found.v2_root.empty()) return false;
  if (!has_word(read_cgroup_file(found.v2_root + "/cgroup.controllers"), controller)) return false;
  std::string parent = found.v2_root + "/gpubox";
  if (::mkdir(parent.c_str(), 0755) != 0 && errno != EEXIST) return false;
  if (!has_word(read_cgroup_file(found.v2_root + "/cgroup.subtree_control"), controller) &&
      !write_cgroup_file(found.v2_root + "/cgroup.subtree_control", "+" + controller)) {
    return false;
  }
  if (!has_word(read_cgroup_file(parent + "/cgroup.subtree_control"), controller) &&
      !write_cgroup_file(parent + "/cgroup.subtree_control", "+" + controller)) {
    return false;
  }
  dir = parent + "/gpubox-" + id;
  if (!make_cgroup(dir, plan)) return false;
  for (const auto& [file, value] : settings(controller, limits, true)) {
    // memory.swap.max is absent without swap accounting: not an error.
    if (!write_cgroup_file(dir + "/" + file, value) && file != "memory.swap.max") return false;
  }
  return true;
}

// cgroup v1: a child of this process's own cgroup in the controller's
// hierarchy, so that limits set above us still apply.
bool try_v1(const Hierarchies& found, const std::string& id, const std::string& controller,
            const ResourceLimits& limits, LimitPlan& plan, std::string& dir) {
  auto root = found.v1_root.find(controller);
  if (root == found.v1_root.end()) return false;
  auto own = found.v1_path.find(controller);
  std::string base = root->second + (own == found.v1_path.end() || own->second == "/" ? "" : own->second);
  dir = base + "/gpubox-" + id;
  if (!make_cgroup(dir, plan)) return false;
  for (const auto& [file, value] : settings(controller, limits, false)) {
    if (!write_cgroup_file(dir + "/" + file, value)) return false;
  }
  return true;
}

}  // namespace

nlohmann::json LimitPlan::to_json() const {
  nlohmann::json rl = nlohmann::json::array();
  for (const auto& [resource, value] : rlimits) rl.push_back({resource, value});
  return {{"cgroup_dirs", cgroup_dirs}, {"procs_files", procs_files}, {"rlimits", rl},
          {"enforced_by", enforced_by}, {"memory_cgroup", memory_cgroup}, {"memory_version", memory_version}};
}

LimitPlan LimitPlan::from_json(const nlohmann::json& json) {
  LimitPlan plan;
  if (!json.is_object()) return plan;
  try {
    plan.cgroup_dirs = json.value("cgroup_dirs", std::vector<std::string>{});
    plan.procs_files = json.value("procs_files", std::vector<std::string>{});
    plan.enforced_by = json.value("enforced_by", std::map<std::string, std::string>{});
    plan.memory_cgroup = json.value("memory_cgroup", "");
    plan.memory_version = json.value("memory_version", "");
  } catch (const nlohmann::json::exception&) {
  }
  return plan;
}

Result<LimitPlan> prepare_limits(const std::string& id, const ResourceLimits& limits) {
  LimitPlan plan;
  // GPUBOX_LIMITS=rlimit skips cgroups: for hosts where the CLI must not touch them, and for tests.
  const char* forced = std::getenv("GPUBOX_LIMITS");
  bool rlimits_only = forced && std::string(forced) == "rlimit";
  Hierarchies found = rlimits_only ? Hierarchies{} : find_hierarchies();
  struct Wanted {
    const char* controller;
    bool wanted;
  };
  // Memory always has a cgroup of its own where one can be made, a limit or
  // not: the sandbox's memory use is then its own, not its host's.
  for (const Wanted& want : {Wanted{"memory", true}, Wanted{"cpu", limits.cpus > 0},
                             Wanted{"pids", limits.pids > 0}}) {
    std::string controller = want.controller;
    if (!want.wanted) {
      plan.enforced_by[controller] = "unlimited";
      continue;
    }
    std::string dir;
    std::string how;
    if (try_v2(found, id, controller, limits, plan, dir)) {
      how = "cgroup v2";
    } else if (try_v1(found, id, controller, limits, plan, dir)) {
      how = "cgroup v1";
    }
    // The sandbox's processes live one level below the limits: the sandbox
    // may write its own cgroup (the agent makes job cgroups there) but not
    // the limits above it.
    std::string leaf = dir + "/" + kSandboxCgroup;
    if (!how.empty() && !make_cgroup(leaf, plan)) how.clear();
    if (!how.empty()) {
      bool accounted_only = controller == "memory" && limits.memory_mib == 0;
      plan.enforced_by[controller] = accounted_only ? "unlimited; accounted in the sandbox's own " + how : how;
      std::string procs = leaf + "/cgroup.procs";
      if (std::find(plan.procs_files.begin(), plan.procs_files.end(), procs) == plan.procs_files.end()) {
        plan.procs_files.push_back(procs);
      }
      if (controller == "memory") {
        plan.memory_cgroup = leaf;  // v1 counts an OOM kill in the victim's cgroup, not the limit's
        plan.memory_version = how == "cgroup v2" ? "v2" : "v1";
      }
      continue;
    }
    // No writable cgroup: the per-process rlimits that come closest.
    if (controller == "memory" && limits.memory_mib == 0) {
      plan.enforced_by[controller] = "unlimited; not accounted apart from the host (no writable memory cgroup)";
    } else if (controller == "memory") {
      // The rlimit binds the agent too, whose threads reserve address space:
      // it never goes below what the agent needs to run.
      std::uint64_t mib = std::max<std::uint64_t>(limits.memory_mib, kMinAddressSpaceMib);
      plan.rlimits.emplace_back(RLIMIT_AS, static_cast<rlim_t>(mib << 20));
      plan.enforced_by[controller] = "rlimit (RLIMIT_AS = " + std::to_string(mib) + " MiB of address space per process)";
    } else if (controller == "pids") {
      plan.rlimits.emplace_back(RLIMIT_NPROC, static_cast<rlim_t>(limits.pids));
      plan.enforced_by[controller] = "rlimit (RLIMIT_NPROC, per user; not enforced for root)";
    } else {
      plan.enforced_by[controller] = "not enforced (no writable cpu cgroup)";
    }
  }
  return plan;
}

Status remove_cgroups(const LimitPlan& plan) {
  Status outcome;
  for (auto it = plan.cgroup_dirs.rbegin(); it != plan.cgroup_dirs.rend(); ++it) {
    // Processes killed a moment ago may still be leaving the cgroup.
    for (int attempt = 0;; ++attempt) {
      if (::rmdir(it->c_str()) == 0 || errno == ENOENT) break;
      if (errno != EBUSY || attempt >= 200) {
        outcome = Status::from_errno(errno, "cannot remove cgroup '" + *it + "'");
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  return outcome;
}

long long oom_kill_count(const LimitPlan& plan) {
  if (plan.memory_cgroup.empty()) return -1;
  std::istringstream lines(read_cgroup_file(plan.memory_cgroup + (plan.memory_version == "v2" ? "/memory.events" : "/memory.oom_control")));
  for (std::string key; lines >> key;) {
    long long value = 0;
    if (!(lines >> value)) break;
    if (key == "oom_kill") return value;
  }
  return -1;
}

long long memory_usage_bytes(const LimitPlan& plan) {
  if (plan.memory_cgroup.empty()) return -1;
  std::string text = read_cgroup_file(plan.memory_cgroup + (plan.memory_version == "v2" ? "/memory.current" : "/memory.usage_in_bytes"));
  if (text.empty()) return -1;
  return std::atoll(text.c_str());
}

}  // namespace gpubox::host
