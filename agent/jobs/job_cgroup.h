// JobCgroup: the memory cgroup a job runs in, for a per-job memory limit and
// for telling an OOM kill from any other SIGKILL. With cgroup v1 (memory
// controller) each job gets its own child cgroup of the agent's; with v2, or
// when the agent may not create cgroups, the agent's own cgroup's counter is
// watched instead (shared by every job). Any thread; one owner.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace gpubox::jobs {

class JobCgroup {
 public:
  // Never null: falls back to the agent's own cgroup, or to nothing.
  static std::unique_ptr<JobCgroup> create(const std::string& job_id, std::optional<std::uint64_t> memory_limit);
  JobCgroup(const JobCgroup&) = delete;
  JobCgroup& operator=(const JobCgroup&) = delete;
  // Removes the job's own cgroup (waiting briefly for its killed processes to leave).
  ~JobCgroup();
  // The job's own cgroup dir, or "" (journaled, so a restarted agent can remove it).
  const std::string& dir() const { return own_dir_; }
  // Removes a job cgroup left by an agent that died; false when it is not empty.
  static bool remove_leftover(const std::string& dir);

  // Moves pid into the job's own cgroup; false when there is none.
  bool add(pid_t pid);
  // OOM kills counted since create(); nullopt when no counter is readable.
  std::optional<std::uint64_t> oom_kills_since_start() const;
  // How OOM kills are detected: "cgroup v1 memory.oom_control of the job's own cgroup", …
  const std::string& evidence() const { return evidence_; }
  // True when a memory limit was asked for and applied.
  bool limited() const { return limited_; }
  // Why no limit could be applied, when one was asked for.
  const std::string& limit_error() const { return limit_error_; }

 private:
  JobCgroup() = default;
  std::optional<std::uint64_t> read_counter() const;

  std::string own_dir_;       // the job's own cgroup, or empty
  std::string counter_file_;  // memory.oom_control (v1) or memory.events (v2), or empty
  std::uint64_t baseline_ = 0;
  std::string evidence_;
  bool limited_ = false;
  std::string limit_error_;
};

}  // namespace gpubox::jobs
