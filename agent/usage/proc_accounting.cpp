#include "agent/usage/proc_accounting.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <fstream>
#include <sstream>

namespace gpubox::usage {
namespace {

std::optional<std::uint64_t> to_number(std::string_view text) {
  std::uint64_t value = 0;
  if (text.empty()) return std::nullopt;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::optional<pid_t> to_pid(std::string_view text) {
  auto value = to_number(text);
  if (!value || *value > 0x7fffffff) return std::nullopt;
  return static_cast<pid_t>(*value);
}

std::vector<std::string_view> split_spaces(std::string_view text) {
  std::vector<std::string_view> words;
  std::size_t at = 0;
  while (at < text.size()) {
    while (at < text.size() && (text[at] == ' ' || text[at] == '\n' || text[at] == '\t')) ++at;
    std::size_t end = at;
    while (end < text.size() && text[end] != ' ' && text[end] != '\n' && text[end] != '\t') ++end;
    if (end > at) words.push_back(text.substr(at, end - at));
    at = end;
  }
  return words;
}

std::vector<std::string> split_on(std::string_view text, char separator) {
  std::vector<std::string> parts;
  std::size_t at = 0;
  while (at <= text.size()) {
    std::size_t end = text.find(separator, at);
    if (end == std::string_view::npos) end = text.size();
    parts.emplace_back(text.substr(at, end - at));
    at = end + 1;
  }
  return parts;
}

std::string read_small_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return {};
  std::ostringstream text;
  text << in.rdbuf();
  std::string all = text.str();
  if (all.size() > (1 << 20)) all.resize(1 << 20);
  return all;
}

double ticks_to_seconds(std::uint64_t ticks) {
  static const long per_second = ::sysconf(_SC_CLK_TCK);
  return static_cast<double>(ticks) / static_cast<double>(per_second > 0 ? per_second : 100);
}

double timeval_seconds(const struct timeval& tv) {
  return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) / 1e6;
}

}  // namespace

std::optional<ProcStat> parse_proc_stat(std::string_view text) {
  // "PID (COMM) STATE PPID PGRP SESSION TTY TPGID FLAGS MINFLT CMINFLT MAJFLT CMAJFLT UTIME STIME CUTIME CSTIME ..."
  std::size_t open = text.find(" (");
  std::size_t close = text.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open) return std::nullopt;
  auto pid = to_pid(text.substr(0, open));
  auto fields = split_spaces(text.substr(close + 1));
  if (!pid || fields.size() < 15) return std::nullopt;
  auto ppid = to_pid(fields[1]);
  auto session = to_pid(fields[3]);
  auto utime = to_number(fields[11]), stime = to_number(fields[12]);
  auto cutime = to_number(fields[13]), cstime = to_number(fields[14]);
  if (!ppid || !session || !utime || !stime || !cutime || !cstime) return std::nullopt;
  return ProcStat{*pid, *ppid, *session, *utime, *stime, *cutime, *cstime};
}

std::optional<std::uint64_t> parse_cpu_stat_usage_usec(std::string_view text) {
  auto words = split_spaces(text);
  for (std::size_t i = 0; i + 1 < words.size(); i += 2) {
    if (words[i] == "usage_usec") return to_number(words[i + 1]);
  }
  return std::nullopt;
}

std::optional<std::uint64_t> parse_single_number(std::string_view text) {
  auto words = split_spaces(text);
  if (words.size() != 1) return std::nullopt;
  return to_number(words[0]);
}

CgroupPaths parse_proc_cgroup(std::string_view text) {
  CgroupPaths paths;
  for (const auto& line : split_on(text, '\n')) {
    // "ID:CONTROLLERS:PATH"; v2 is "0::PATH".
    std::size_t first = line.find(':');
    std::size_t second = first == std::string::npos ? std::string::npos : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    std::string controllers = line.substr(first + 1, second - first - 1);
    std::string path = line.substr(second + 1);
    if (path.empty() || path[0] != '/') continue;
    if (line.compare(0, first, "0") == 0 && controllers.empty()) {
      paths.v2 = path;
      continue;
    }
    for (const auto& name : split_on(controllers, ',')) {
      if (!name.empty()) paths.v1[name] = path;
    }
  }
  return paths;
}

std::optional<CgroupMount> parse_mountinfo_line(std::string_view line) {
  auto words = split_spaces(line);
  std::size_t dash = 0;
  for (std::size_t i = 6; i < words.size(); ++i) {
    if (words[i] == "-") {
      dash = i;
      break;
    }
  }
  if (dash == 0 || dash + 1 >= words.size()) return std::nullopt;
  std::string_view type = words[dash + 1];
  if (type != "cgroup" && type != "cgroup2") return std::nullopt;
  CgroupMount mount;
  mount.v2 = type == "cgroup2";
  mount.root = std::string(words[3]);
  mount.mount_point = std::string(words[4]);
  if (mount.root.empty() || mount.root[0] != '/' || mount.mount_point.empty() || mount.mount_point[0] != '/') return std::nullopt;
  if (!mount.v2 && dash + 3 < words.size()) {
    for (const auto& option : split_on(words[dash + 3], ',')) {
      if (!option.empty() && option != "rw" && option != "ro") mount.controllers.push_back(option);
    }
  }
  return mount;
}

std::optional<std::string> cgroup_dir(const CgroupMount& mount, const std::string& path) {
  std::string root = mount.root == "/" ? "" : mount.root;
  if (path.compare(0, root.size(), root) != 0) return std::nullopt;
  std::string rest = path.substr(root.size());
  if (!rest.empty() && rest[0] != '/') return std::nullopt;  // "/a" is not under "/ab"
  if (rest.find("/..") != std::string::npos) return std::nullopt;
  if (rest == "/") rest.clear();
  return (mount.mount_point == "/" ? "" : mount.mount_point) + rest;
}

double live_cpu_seconds(const std::string& proc_root,
                        const std::function<bool(const ProcStat&, const std::map<pid_t, pid_t>&)>& include) {
  std::vector<ProcStat> stats;
  std::map<pid_t, pid_t> parents;
  DIR* dir = ::opendir(proc_root.c_str());
  if (!dir) return 0;
  while (struct dirent* entry = ::readdir(dir)) {
    if (!to_pid(entry->d_name)) continue;
    auto stat = parse_proc_stat(read_small_file(proc_root + "/" + entry->d_name + "/stat"));
    if (!stat) continue;  // ended while we looked
    parents[stat->pid] = stat->ppid;
    stats.push_back(*stat);
  }
  ::closedir(dir);
  std::uint64_t ticks = 0;
  for (const auto& stat : stats) {
    if (include(stat, parents)) ticks += stat.total();
  }
  return ticks_to_seconds(ticks);
}

double process_tree_cpu_seconds(const std::string& proc_root) {
  // Reaped children first, then the live ones: a child reaped in between is
  // missed by this one reading rather than counted twice.
  struct rusage self {}, children {};
  ::getrusage(RUSAGE_SELF, &self);
  ::getrusage(RUSAGE_CHILDREN, &children);
  double reaped = timeval_seconds(self.ru_utime) + timeval_seconds(self.ru_stime) + timeval_seconds(children.ru_utime) +
                  timeval_seconds(children.ru_stime);
  const pid_t agent = ::getpid();
  double live = live_cpu_seconds(proc_root, [agent](const ProcStat& stat, const std::map<pid_t, pid_t>& parents) {
    if (stat.pid == agent) return false;  // in RUSAGE_SELF (its cutime: RUSAGE_CHILDREN)
    pid_t at = stat.ppid;
    for (int depth = 0; depth < 4096 && at > 0; ++depth) {
      if (at == agent) return true;
      auto parent = parents.find(at);
      if (parent == parents.end()) return false;
      at = parent->second;
    }
    return false;
  });
  return reaped + live;
}

double session_cpu_seconds(pid_t sid, const std::string& proc_root) {
  if (sid <= 0) return 0;
  return live_cpu_seconds(proc_root, [sid](const ProcStat& stat, const std::map<pid_t, pid_t>&) { return stat.session == sid; });
}

CgroupUsage read_cgroup_usage(const std::string& proc_self) {
  CgroupUsage usage;
  CgroupPaths paths = parse_proc_cgroup(read_small_file(proc_self + "/cgroup"));
  std::vector<CgroupMount> mounts;
  for (const auto& line : split_on(read_small_file(proc_self + "/mountinfo"), '\n')) {
    if (auto mount = parse_mountinfo_line(line)) mounts.push_back(std::move(*mount));
  }
  // The directory of the agent's cgroup in the v1 hierarchy that has controller, or in v2.
  auto dir_of = [&](const std::string& controller, bool v2) -> std::optional<std::string> {
    for (const auto& mount : mounts) {
      if (mount.v2 != v2) continue;
      if (!v2 && std::find(mount.controllers.begin(), mount.controllers.end(), controller) == mount.controllers.end()) continue;
      std::optional<std::string> path = paths.v2;
      if (!v2) {
        auto found = paths.v1.find(controller);
        path = found == paths.v1.end() ? std::nullopt : std::optional<std::string>(found->second);
      }
      if (!path) continue;
      if (auto dir = cgroup_dir(mount, *path)) return dir;
    }
    return std::nullopt;
  };
  if (auto dir = dir_of("cpu", true)) {
    if (auto usec = parse_cpu_stat_usage_usec(read_small_file(*dir + "/cpu.stat"))) {
      usage.cpu_source = "cgroup v2 cpu.stat usage_usec";
      usage.cpu_path = *dir;
      usage.cpu_s = static_cast<double>(*usec) / 1e6;
    }
  }
  if (!usage.cpu_s) {
    if (auto dir = dir_of("cpuacct", false)) {
      if (auto ns = parse_single_number(read_small_file(*dir + "/cpuacct.usage"))) {
        usage.cpu_source = "cgroup v1 cpuacct.usage";
        usage.cpu_path = *dir;
        usage.cpu_s = static_cast<double>(*ns) / 1e9;
      }
    }
  }
  if (auto dir = dir_of("memory", true); dir && !read_small_file(*dir + "/memory.current").empty()) {
    usage.memory_path = *dir;
    usage.memory_peak_bytes = parse_single_number(read_small_file(*dir + "/memory.peak"));
    usage.memory_current_bytes = parse_single_number(read_small_file(*dir + "/memory.current"));
  } else if (auto v1 = dir_of("memory", false)) {
    usage.memory_path = *v1;
    usage.memory_peak_bytes = parse_single_number(read_small_file(*v1 + "/memory.max_usage_in_bytes"));
    usage.memory_current_bytes = parse_single_number(read_small_file(*v1 + "/memory.usage_in_bytes"));
  }
  return usage;
}

}  // namespace gpubox::usage
