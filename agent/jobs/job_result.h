// JobResult: the record every job ends with, whatever ended it (rpc/PROTOCOL.md,
// "Jobs"), and the rules that turn an ending into a status, a hint and an
// error kind. Plain data and pure functions; any thread.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/stager.h"

namespace gpubox::jobs {

enum class JobStatus { succeeded, failed, timed_out, cancelled, killed, lost };
std::string job_status_name(JobStatus status);

// Why the agent stopped a job (none: it ended by itself).
enum class StopReason { none, job_timeout, container_deadline, cancel, agent_shutdown, idle, lease };
// The result's deadline_fired: "job_timeout" / "container_deadline", else null.
std::optional<std::string> deadline_fired_name(StopReason reason);
std::string stop_reason_name(StopReason reason);
std::optional<StopReason> stop_reason_from_name(const std::string& name);

// How the job's process ended, as the agent saw it.
struct Ending {
  bool started = false;            // false: it never ran (cancelled while queued, spawn failed, lost)
  int exit_code = 0;               // valid when signal == 0 and started
  int signal = 0;
  StopReason stop = StopReason::none;
  bool killed_after_grace = false; // the agent had to SIGKILL the group
  bool oom_killed = false;
  std::string oom_evidence;        // how the OOM kill was detected
  // For a SIGKILL that is not an OOM kill: how that was ruled out, or why it
  // could not be ("the job's cgroup counted no OOM kill", "no cgroup memory counter to check").
  std::string oom_ruled_out;
  bool work_disk_full = false;     // the work dir's filesystem had no space left at the end
  std::string spawn_error;         // why it could not start
  bool lost = false;               // the agent restarted while the job was not finished
  double cpu_s = -1;               // the main process's and its waited-for descendants' CPU seconds; -1 unknown
};

struct JobResult {
  JobStatus status = JobStatus::failed;
  std::optional<int> exit_code;
  std::optional<int> signal;
  double job_wall_s = 0;
  // CPU seconds of the job's shell and every descendant it (or they) waited
  // for, from wait4; null when unknown (never ran, lost, a journal from before).
  std::optional<double> job_cpu_s;
  std::optional<std::string> deadline_fired;
  std::string stdout_tail;
  std::string stderr_tail;
  std::vector<std::string> output_files;    // under out/, hidden ones left out
  std::vector<std::string> featured_files;  // under out/, matching a featured rule
  std::vector<std::string> missing_files;   // "path: reason" for what staging could not archive
  std::string system_hint;                  // human text; empty when there is nothing to say
  std::optional<std::string> error_kind;    // machine-readable; null when succeeded

  nlohmann::json to_json() const;
  static JobResult from_json(const nlohmann::json& value);
};

// The status, deadline_fired, system_hint and error_kind of an ending.
JobResult classify(const Ending& ending, const StagingSummary& staging);

// The last max_bytes of a file ("" when unreadable), cut at a UTF-8 character start.
std::string read_tail(const std::string& path, std::size_t max_bytes);
constexpr std::size_t kLogTailBytes = 64 * 1024;
// A job without output rules features its first this many files (all are still archived and listed).
constexpr std::size_t kDefaultFeaturedFiles = 20;

}  // namespace gpubox::jobs
