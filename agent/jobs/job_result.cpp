#include "agent/jobs/job_result.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fd.h"
#include "agent/signals.h"

namespace gpubox::jobs {
namespace {

using nlohmann::json;

json optional_json(const std::optional<int>& value) { return value ? json(*value) : json(); }
json optional_json(const std::optional<std::string>& value) { return value ? json(*value) : json(); }
json optional_json(const std::optional<double>& value) { return value ? json(*value) : json(); }

void add_hint(std::string& hints, const std::string& hint) {
  if (!hints.empty()) hints += "; ";
  hints += hint;
}

}  // namespace

std::string job_status_name(JobStatus status) {
  switch (status) {
    case JobStatus::succeeded: return "succeeded";
    case JobStatus::failed: return "failed";
    case JobStatus::timed_out: return "timed_out";
    case JobStatus::cancelled: return "cancelled";
    case JobStatus::killed: return "killed";
    case JobStatus::lost: return "lost";
  }
  return "failed";
}

std::optional<std::string> deadline_fired_name(StopReason reason) {
  if (reason == StopReason::job_timeout) return "job_timeout";
  if (reason == StopReason::container_deadline) return "container_deadline";
  return std::nullopt;
}

std::string stop_reason_name(StopReason reason) {
  switch (reason) {
    case StopReason::none: return "none";
    case StopReason::job_timeout: return "job_timeout";
    case StopReason::container_deadline: return "container_deadline";
    case StopReason::cancel: return "cancel";
    case StopReason::agent_shutdown: return "agent_shutdown";
    case StopReason::idle: return "idle";
    case StopReason::lease: return "lease";
  }
  return "none";
}

std::optional<StopReason> stop_reason_from_name(const std::string& name) {
  for (StopReason reason : {StopReason::none, StopReason::job_timeout, StopReason::container_deadline,
                            StopReason::cancel, StopReason::agent_shutdown, StopReason::idle, StopReason::lease}) {
    if (stop_reason_name(reason) == name) return reason;
  }
  return std::nullopt;
}

JobResult classify(const Ending& ending, const StagingSummary& staging) {
  JobResult result;
  std::string hints;
  if (ending.started && !ending.lost) {
    if (ending.signal) result.signal = ending.signal;
    else result.exit_code = ending.exit_code;
  }
  result.deadline_fired = deadline_fired_name(ending.stop);

  if (ending.lost) {
    result.status = JobStatus::lost;
    result.error_kind = "lost";
    add_hint(hints, "the agent restarted while the job was unfinished; what it left under out/ was staged");
  } else if (!ending.spawn_error.empty()) {
    result.status = JobStatus::failed;
    result.error_kind = "spawn_failed";
    add_hint(hints, "the job could not start: " + ending.spawn_error);
  } else {
    switch (ending.stop) {
      case StopReason::job_timeout:
        result.status = JobStatus::timed_out;
        result.error_kind = "job_timeout";
        add_hint(hints, "the job's own timeout fired: TERM to its process group");
        break;
      case StopReason::container_deadline:
        result.status = JobStatus::timed_out;
        result.error_kind = "container_deadline";
        add_hint(hints, "the container deadline is near: the harvest watchdog stopped the job");
        break;
      case StopReason::cancel:
        result.status = JobStatus::cancelled;
        result.error_kind = "cancelled";
        add_hint(hints, ending.started ? "cancelled by job.cancel" : "cancelled by job.cancel before it started");
        break;
      case StopReason::agent_shutdown:
      case StopReason::idle:
      case StopReason::lease:
        result.status = JobStatus::killed;
        result.error_kind = stop_reason_name(ending.stop);
        add_hint(hints, ending.stop == StopReason::agent_shutdown ? "the agent shut down (SIGTERM or sys.shutdown)"
                        : ending.stop == StopReason::idle         ? "the idle watchdog shut the agent down"
                                                                  : "the owner lease expired (no sys.heartbeat)");
        break;
      case StopReason::none:
        if (ending.oom_killed && (ending.signal || ending.exit_code != 0)) {
          result.status = ending.signal ? JobStatus::killed : JobStatus::failed;
          result.error_kind = "oom";
        } else if (ending.signal) {
          result.status = JobStatus::killed;
          result.error_kind = "signal";
          add_hint(hints, "killed by " + signal_name(ending.signal) + ", not sent by the agent");
          if (ending.signal == SIGKILL) {
            add_hint(hints, ending.oom_ruled_out.empty()
                                ? "possibly the kernel OOM killer (no cgroup memory counter to confirm it)"
                                : "not the OOM killer: " + ending.oom_ruled_out);
          }
        } else if (ending.exit_code != 0) {
          result.status = JobStatus::failed;
          result.error_kind = "nonzero_exit";
        } else {
          result.status = JobStatus::succeeded;
        }
        break;
    }
    if (ending.stop != StopReason::none && ending.started) {
      add_hint(hints, ending.killed_after_grace ? "it outlived the grace and its process group was killed"
                                                : "it ended within the grace after TERM");
    }
  }
  if (ending.oom_killed) {
    add_hint(hints, "out of memory: the kernel OOM killer killed the job or one of its processes (" + ending.oom_evidence + ")");
  }
  if (ending.work_disk_full) {
    add_hint(hints, "disk full: the work dir's filesystem had no space left when the job ended");
    // A job that failed on its own most likely failed because of it.
    if (!result.error_kind || result.error_kind == "nonzero_exit" || result.error_kind == "signal") result.error_kind = "disk_full";
  }
  if (!staging.archive_written) {
    add_hint(hints, "staging failed: " + staging.error);
    if (!result.error_kind || result.status == JobStatus::succeeded) result.error_kind = staging.disk_full ? "disk_full" : "staging_failed";
  } else if (!staging.missing.empty()) {
    add_hint(hints, std::to_string(staging.missing.size()) + " file(s) could not be archived (see missing_files)" +
                        (staging.disk_full ? ": disk full at the staging dir" : ""));
    if (!result.error_kind) result.error_kind = staging.disk_full ? "disk_full" : "staging_incomplete";
  }
  if (staging.output_files.empty() && staging.missing.empty()) add_hint(hints, "out/ is empty");
  result.missing_files = staging.missing;
  result.system_hint = hints;
  return result;
}

std::string read_tail(const std::string& path, std::size_t max_bytes) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (!fd.valid()) return "";
  struct stat st;
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return "";
  off_t start = st.st_size > static_cast<off_t>(max_bytes) ? st.st_size - static_cast<off_t>(max_bytes) : 0;
  std::string text(static_cast<std::size_t>(st.st_size - start), '\0');
  std::size_t got = 0;
  while (got < text.size()) {
    ssize_t n = ::pread(fd.get(), text.data() + got, text.size() - got, start + static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  text.resize(got);
  // Cut at a character start so the tail is valid UTF-8 when the log is.
  std::size_t skip = 0;
  if (start > 0) {
    while (skip < text.size() && skip < 3 && (static_cast<unsigned char>(text[skip]) & 0xC0) == 0x80) ++skip;
  }
  return text.substr(skip);
}

json JobResult::to_json() const {
  return json{{"status", job_status_name(status)},
              {"exit_code", optional_json(exit_code)},
              {"signal", optional_json(signal)},
              {"job_wall_s", job_wall_s},
              {"job_cpu_s", optional_json(job_cpu_s)},
              {"deadline_fired", optional_json(deadline_fired)},
              {"stdout_tail", stdout_tail},
              {"stderr_tail", stderr_tail},
              {"output_files", output_files},
              {"featured_files", featured_files},
              {"missing_files", missing_files},
              {"system_hint", system_hint},
              {"error_kind", optional_json(error_kind)}};
}

JobResult JobResult::from_json(const json& value) {
  JobResult result;
  std::string status = value.value("status", "failed");
  for (JobStatus s : {JobStatus::succeeded, JobStatus::failed, JobStatus::timed_out, JobStatus::cancelled,
                      JobStatus::killed, JobStatus::lost}) {
    if (job_status_name(s) == status) result.status = s;
  }
  auto opt_int = [&](const char* key) -> std::optional<int> {
    if (value.contains(key) && value[key].is_number_integer()) return value[key].get<int>();
    return std::nullopt;
  };
  auto opt_string = [&](const char* key) -> std::optional<std::string> {
    if (value.contains(key) && value[key].is_string()) return value[key].get<std::string>();
    return std::nullopt;
  };
  auto strings = [&](const char* key) {
    std::vector<std::string> list;
    if (value.contains(key) && value[key].is_array()) {
      for (const auto& item : value[key]) {
        if (item.is_string()) list.push_back(item.get<std::string>());
      }
    }
    return list;
  };
  result.exit_code = opt_int("exit_code");
  result.signal = opt_int("signal");
  result.job_wall_s = value.value("job_wall_s", 0.0);
  if (value.contains("job_cpu_s") && value["job_cpu_s"].is_number()) result.job_cpu_s = value["job_cpu_s"].get<double>();
  result.deadline_fired = opt_string("deadline_fired");
  result.stdout_tail = value.value("stdout_tail", "");
  result.stderr_tail = value.value("stderr_tail", "");
  result.output_files = strings("output_files");
  result.featured_files = strings("featured_files");
  result.missing_files = strings("missing_files");
  result.system_hint = value.value("system_hint", "");
  result.error_kind = opt_string("error_kind");
  return result;
}

}  // namespace gpubox::jobs
