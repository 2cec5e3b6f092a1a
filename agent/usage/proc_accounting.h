// What the kernel accounts for processes and cgroups, read from /proc and
// /sys/fs/cgroup without linking anything: the parsers (pure functions, unit
// tested with bad input) and the sums sys.usage reports (rpc/PROTOCOL.md,
// "System"). Any thread; nothing here keeps state.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpubox::usage {

// The fields of /proc/PID/stat that CPU accounting needs; times in clock ticks.
struct ProcStat {
  pid_t pid = 0;
  pid_t ppid = 0;
  pid_t session = 0;
  std::uint64_t utime = 0;   // user time of the process (all its threads)
  std::uint64_t stime = 0;   // system time
  std::uint64_t cutime = 0;  // user time of the children it waited for (and theirs)
  std::uint64_t cstime = 0;
  std::uint64_t total() const { return utime + stime + cutime + cstime; }
};
// nullopt unless text is a whole /proc/PID/stat line (comm may hold spaces and ')').
std::optional<ProcStat> parse_proc_stat(std::string_view text);

// cgroup v2 cpu.stat's usage_usec; nullopt when absent or not a number.
std::optional<std::uint64_t> parse_cpu_stat_usage_usec(std::string_view text);
// A file holding one unsigned number (cpuacct.usage, memory.peak), surrounding whitespace allowed.
std::optional<std::uint64_t> parse_single_number(std::string_view text);

// The agent's cgroups, from /proc/self/cgroup: the v2 path and each v1 controller's.
struct CgroupPaths {
  std::optional<std::string> v2;
  std::map<std::string, std::string> v1;  // controller ("cpuacct", "memory") → path
};
CgroupPaths parse_proc_cgroup(std::string_view text);

// One cgroup filesystem of /proc/self/mountinfo: the cgroup mounted (root) and where.
struct CgroupMount {
  bool v2 = false;
  std::vector<std::string> controllers;  // v1 only
  std::string root;
  std::string mount_point;
};
// nullopt for a line that is not a cgroup or cgroup2 mount (or is malformed).
std::optional<CgroupMount> parse_mountinfo_line(std::string_view line);

// Where a cgroup's files are: the mount point plus the path below the mount's
// root; nullopt when the cgroup is not under that mount's root.
std::optional<std::string> cgroup_dir(const CgroupMount& mount, const std::string& path);

// CPU seconds of the processes under proc_root (a /proc) that `include` selects,
// each with its waited-for children (utime+stime+cutime+cstime). Unreadable
// entries (processes that just ended) are skipped.
double live_cpu_seconds(const std::string& proc_root, const std::function<bool(const ProcStat&, const std::map<pid_t, pid_t>&)>& include);

// The sandbox's CPU as a process tree: the agent itself and every child it
// reaped (getrusage SELF + CHILDREN; a child's own reaped children are in its
// figure) plus the live descendants of the agent under proc_root.
double process_tree_cpu_seconds(const std::string& proc_root = "/proc");
// A job's live processes: every process of the session `sid` (a job is a session of its own).
double session_cpu_seconds(pid_t sid, const std::string& proc_root = "/proc");

// The agent's own cgroup accounting, where readable.
struct CgroupUsage {
  std::string cpu_source;  // "cgroup v2 cpu.stat usage_usec" / "cgroup v1 cpuacct.usage", or "" when none
  std::string cpu_path;    // the cgroup's directory
  std::optional<double> cpu_s;
  std::string memory_path;
  std::optional<std::uint64_t> memory_peak_bytes;     // v2 memory.peak, v1 memory.max_usage_in_bytes
  std::optional<std::uint64_t> memory_current_bytes;  // v2 memory.current, v1 memory.usage_in_bytes
};
// Reads PROC_SELF/cgroup and PROC_SELF/mountinfo, then the cgroup files where those mounts put them.
CgroupUsage read_cgroup_usage(const std::string& proc_self = "/proc/self");

}  // namespace gpubox::usage
