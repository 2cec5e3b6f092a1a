// JobManager: every batch job of the agent, from submission to the staged
// archive and its acknowledgement (docs/architecture.md, "Lifecycle of a
// sandbox", steps 4–5). Starts jobs in FIFO order up to the concurrency
// limit, stops them (own timeout, cancel, harvest watchdog, shutdown) with
// TERM, grace, KILL of the process group, stages every ending on its own
// stager thread, and journals each transition.
//
// Thread rules: public methods may be called from any thread. Exit callbacks
// and timers run on the agent's event-loop thread (through JobsHost). State
// is guarded by mutex_; the stager thread does its file work without it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>

#include "agent/config.h"
#include "agent/jobs/job_cgroup.h"
#include "agent/jobs/job_queue.h"
#include "agent/jobs/job_result.h"
#include "agent/jobs/job_spec.h"
#include "agent/jobs/journal.h"
#include "base/manifest.h"
#include "agent/process_table.h"
#include "agent/timers.h"
#include "base/thread_annotations.h"

namespace gpubox::jobs {

using Clock = std::chrono::steady_clock;

// What the manager needs from the agent.
struct JobsHost {
  ProcessLauncher* launcher = nullptr;
  // Runs fn on the event-loop thread (the thread that owns timers).
  std::function<void(std::function<void()>)> post;
  Timers* timers = nullptr;  // event-loop thread only
  std::vector<std::pair<std::string, std::string>> child_env;
  // When the harvest watchdog will fire (the container deadline minus the margin), if ever.
  std::optional<Clock::time_point> harvest_at;
  // A job started or ended (the idle watchdog's input). Any thread.
  std::function<void()> on_activity;
};

enum class JobState { queued, running, stopping, staging, finished };
std::string job_state_name(JobState state);

// Where a finished job's staged archive lies.
struct StagedArchive {
  std::string path;
  std::uint64_t size = 0;
  std::string sha256;
  nlohmann::json manifest;
};

class JobManager {
 public:
  // Creates the job and staging dirs, opens the journal and replays it: jobs
  // that were unfinished are staged again from what they left and end `lost`.
  static Result<std::unique_ptr<JobManager>> create(const JobsConfig& config, const std::string& state_dir, JobsHost host);
  JobManager(const JobManager&) = delete;
  JobManager& operator=(const JobManager&) = delete;
  // Stops the stager thread (after the job it is staging). Running jobs are
  // not touched: call begin_shutdown() first.
  ~JobManager();

  // A fresh folder (under the jobs dir) to receive a submission's inputs
  // into; resource_exhausted when they add up to more than jobs.max_input_bytes.
  Result<std::string> make_incoming_dir(const JobSpec& spec);
  // Accepts a job whose inputs were verified into incoming_dir (which becomes
  // its work dir); starts it at once when a slot is free. Returns its info.
  Result<nlohmann::json> submit(JobSpec spec, const std::string& incoming_dir);

  Result<nlohmann::json> info(const std::string& id) const;
  nlohmann::json list() const;
  // sys.usage's jobs, in submission order: [{job_id, state, wall_s, cpu_s,
  // session}]. cpu_s is the finished job's (null when unknown or not yet
  // ended); session is the running job's session id (its pid), for the
  // caller to add its live processes' CPU without this lock held.
  nlohmann::json usage() const;
  // Waits until the job's info changes after `after_version` (its "version"),
  // until it finishes, or until deadline / stopped() — whichever is first.
  Result<nlohmann::json> wait_change(const std::string& id, std::uint64_t after_version, Clock::time_point deadline,
                                     const std::function<bool()>& stopped) const;
  Result<nlohmann::json> cancel(const std::string& id);
  // Deletes the staged archive and the work dir; the job stays listed.
  Result<nlohmann::json> ack(const std::string& id);
  // REQUIRES the job finished and not acknowledged (else busy / not_found).
  Result<StagedArchive> staged_archive(const std::string& id) const;
  // The path of the job's stdout.log or stderr.log, and whether the job can still write to it.
  Result<std::pair<std::string, bool>> log_file(const std::string& id, const std::string& stream) const;

  // The harvest watchdog: stops every running job (and cancels the waiting
  // ones) with `reason`, and refuses new submissions from now on.
  void stop_all(StopReason reason, const std::string& refusal);
  // Agent shutdown: stop_all, then, once every job is staged, copies the
  // unacknowledged archives to persist_dir (when not empty) and calls done
  // on the event-loop thread.
  void begin_shutdown(StopReason reason, const std::string& persist_dir, std::function<void()> done);
  // True while a job is queued, running, stopping or staging.
  bool busy() const;
  // True once begin_shutdown's work is done (every job finished and persisted).
  bool shut_down() const;

 private:
  struct Job;
  JobManager(JobsConfig config, std::string jobs_dir, std::string staging_dir, JobsHost host, std::unique_ptr<Journal> journal);

  void replay(const std::vector<nlohmann::json>& events);
  // Appends and fsyncs; with sync false, only appends (a sync() follows before any reply).
  void journal(nlohmann::json event, bool sync = true);
  void sync_journal();
  nlohmann::json info_locked(const Job& job) const REQUIRES(mutex_);
  // Seconds from start to the main process's exit (or to now while it runs); nullopt before it started.
  static std::optional<double> wall_seconds(const Job& job);
  void changed_locked(Job& job) REQUIRES(mutex_);
  void start_ready_locked() REQUIRES(mutex_);
  void start_locked(Job& job) REQUIRES(mutex_);
  void stop_locked(Job& job, StopReason reason) REQUIRES(mutex_);
  void on_exit(const std::string& id, ExitStatus status);  // loop thread
  void on_grace_over(const std::string& id);                // loop thread
  void queue_staging_locked(Job& job) REQUIRES(mutex_);
  void stager_loop();
  void stage(const std::string& id);
  void finish_shutdown_if_done_locked() REQUIRES(mutex_);
  void persist_unacked_locked(const std::string& dir) REQUIRES(mutex_);
  std::string job_dir(const std::string& id) const { return jobs_dir_ + "/" + id; }
  std::string staged_dir(const std::string& id) const { return staging_dir_ + "/" + id; }

  const JobsConfig config_;
  const std::string jobs_dir_;
  const std::string staging_dir_;
  JobsHost host_;
  std::unique_ptr<Journal> journal_;

  mutable Mutex mutex_;
  mutable std::condition_variable_any changed_;  // any job's info changed
  std::map<std::string, std::unique_ptr<Job>> jobs_ GUARDED_BY(mutex_);
  JobQueue queue_ GUARDED_BY(mutex_);
  long long next_number_ GUARDED_BY(mutex_) = 1;
  std::uint64_t incoming_counter_ GUARDED_BY(mutex_) = 0;
  std::string refusal_ GUARDED_BY(mutex_);               // non-empty: job.submit is refused with it
  std::deque<std::string> to_stage_ GUARDED_BY(mutex_);  // for the stager thread
  bool stager_stop_ GUARDED_BY(mutex_) = false;
  bool shutting_down_ GUARDED_BY(mutex_) = false;
  bool shut_down_ GUARDED_BY(mutex_) = false;
  std::string persist_dir_ GUARDED_BY(mutex_);
  std::function<void()> shutdown_done_ GUARDED_BY(mutex_);

  std::thread stager_;  // last: starts after everything above exists
};

}  // namespace gpubox::jobs
