// Over 600 lines: one job's whole state machine (submit, start, stop, stage, ack, shutdown) under one mutex; the queue, journal and stager are their own files.
#include "agent/jobs/job_manager.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "agent/jobs/journal_replay.h"
#include "base/stager.h"
#include "agent/log.h"
#include "base/thread_annotations.h"

namespace gpubox::jobs {
namespace {

using nlohmann::json;
namespace stdfs = std::filesystem;

double unix_now() {
  struct timespec now;
  ::clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) / 1e9;
}

double seconds_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

Status write_json_file(const std::string& path, const json& value) {
  std::string temp = path + ".tmp";
  {
    std::ofstream out(temp, std::ios::trunc);
    out << value.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
    out.flush();
    if (!out) return Status(ErrorCode::resource_exhausted, "cannot write " + path);
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) return Status::from_errno(errno, "cannot rename " + temp);
  return Status::ok();
}

bool disk_full(const std::string& path) {
  struct statvfs fs;
  if (::statvfs(path.c_str(), &fs) != 0) return false;
  return static_cast<unsigned long long>(fs.f_bavail) * fs.f_frsize < 64 * 1024;
}

Fd open_log(const std::string& path) {
  return Fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644));
}

}  // namespace

std::string job_state_name(JobState state) {
  switch (state) {
    case JobState::queued: return "queued";
    case JobState::running: return "running";
    case JobState::stopping: return "stopping";
    case JobState::staging: return "staging";
    case JobState::finished: return "finished";
  }
  return "finished";
}

struct JobManager::Job {
  std::string id;
  JobSpec spec;
  JobState state = JobState::queued;
  std::uint64_t version = 1;
  double submitted_unix = 0;
  std::optional<double> started_unix;
  std::optional<double> ended_unix;
  Clock::time_point started_at{};
  Clock::time_point ended_at{};
  std::optional<double> effective_timeout_s;
  pid_t pid = 0;
  Ending ending;
  Timers::TimerId timeout_timer = 0;  // touched on the loop thread only
  Timers::TimerId grace_timer = 0;    // touched on the loop thread only
  std::unique_ptr<JobCgroup> cgroup;
  std::optional<JobResult> result;
  json manifest;
  bool acked = false;
  std::string persisted_to;
};

Result<std::unique_ptr<JobManager>> JobManager::create(const JobsConfig& config, const std::string& state_dir,
                                                       JobsHost host) {
  std::string jobs_dir = config.dir.empty() ? state_dir + "/jobs" : config.dir;
  std::string staging_dir = config.staging_dir.empty() ? state_dir + "/staged" : config.staging_dir;
  for (const auto& dir : {jobs_dir, staging_dir}) {
    std::error_code error;
    stdfs::create_directories(dir, error);
    if (error) return Status(ErrorCode::permission_denied, "cannot create the jobs dir " + dir + ": " + error.message());
  }
  std::string journal_path = state_dir + "/events.jsonl";
  int skipped = 0;
  auto events = read_journal(journal_path, &skipped);
  if (skipped) log::warn("journal: skipped unreadable lines", {{"lines", skipped}, {"path", journal_path}});
  auto journal = Journal::open(journal_path);
  if (!journal) return journal.status();
  std::unique_ptr<JobManager> manager(
      new JobManager(config, std::move(jobs_dir), std::move(staging_dir), std::move(host), std::move(*journal)));
  manager->replay(events);
  return manager;
}

JobManager::JobManager(JobsConfig config, std::string jobs_dir, std::string staging_dir, JobsHost host,
                       std::unique_ptr<Journal> journal)
    : config_(std::move(config)),
      jobs_dir_(std::move(jobs_dir)),
      staging_dir_(std::move(staging_dir)),
      host_(std::move(host)),
      journal_(std::move(journal)),
      queue_(static_cast<std::size_t>(config_.max_concurrent), static_cast<std::size_t>(config_.max_queued)),
      stager_([this] { stager_loop(); }) {}

JobManager::~JobManager() {
  {
    MutexLock lock(mutex_);
    stager_stop_ = true;
  }
  changed_.notify_all();
  stager_.join();
}

void JobManager::journal(json event, bool sync) {
  if (Status appended = journal_->append(std::move(event), sync); !appended) {
    log::error("journal append failed", {{"error", appended.message()}});
  }
}

void JobManager::sync_journal() {
  if (Status synced = journal_->sync(); !synced) log::error("journal fsync failed", {{"error", synced.message()}});
}

void JobManager::replay(const std::vector<json>& events) {
  Replay replayed = replay_journal(events);
  MutexLock lock(mutex_);
  next_number_ = replayed.last_number + 1;
  int lost = 0;
  for (auto& [id, record] : replayed.jobs) {
    auto job = std::make_unique<Job>();
    job->id = id;
    try {
      job->spec = job_spec_from_json(record.spec);
    } catch (const std::exception& e) {
      log::warn("journal: a job's spec is unreadable", {{"job", id}, {"error", e.what()}});
    }
    job->submitted_unix = record.submitted_unix;
    job->acked = record.acked;
    job->persisted_to = record.persisted_to;
    if (record.state == "finished") {
      job->state = JobState::finished;
      try {
        job->result = JobResult::from_json(record.result);
      } catch (const std::exception& e) {
        log::warn("journal: a job's result is unreadable", {{"job", id}, {"error", e.what()}});
        job->result = JobResult{};
      }
      job->manifest = record.manifest;
    } else {
      // Never silently forgotten: stage whatever it left and report it lost.
      job->ending.lost = true;
      job->ending.started = record.state != "queued";
      journal({{"event", "lost"}, {"job", id}, {"last_state", record.state}});
      if (!record.cgroup.empty()) JobCgroup::remove_leftover(record.cgroup);
      job->state = JobState::staging;
      to_stage_.push_back(id);
      ++lost;
    }
    jobs_.emplace(id, std::move(job));
  }
  if (!replayed.jobs.empty()) {
    log::info("journal replayed", {{"jobs", static_cast<int>(replayed.jobs.size())}, {"lost", lost}});
  }
  changed_.notify_all();
}

Result<std::string> JobManager::make_incoming_dir(const JobSpec& spec) {
  std::uint64_t total = 0;
  for (const auto& input : spec.inputs) total += input.size;
  if (total > static_cast<std::uint64_t>(config_.max_input_bytes)) {
    return Status(ErrorCode::resource_exhausted, "params.inputs: " + std::to_string(total) + " bytes in all, above jobs.max_input_bytes (" +
                                                     std::to_string(config_.max_input_bytes) + ")");
  }
  std::string dir;
  {
    MutexLock lock(mutex_);
    if (!refusal_.empty()) return Status(ErrorCode::unavailable, refusal_);
    dir = jobs_dir_ + "/.incoming-" + std::to_string(::getpid()) + "-" + std::to_string(++incoming_counter_);
  }
  std::error_code error;
  stdfs::remove_all(dir, error);
  if (::mkdir(dir.c_str(), 0755) != 0) return Status::from_errno(errno, "cannot create " + dir);
  return dir;
}

Result<json> JobManager::submit(JobSpec spec, const std::string& incoming_dir) {
  MutexLock lock(mutex_);
  if (!refusal_.empty()) return Status(ErrorCode::unavailable, refusal_);
  if (queue_.waiting() >= static_cast<std::size_t>(config_.max_queued) &&
      queue_.running() >= static_cast<std::size_t>(config_.max_concurrent)) {
    return Status(ErrorCode::resource_exhausted, std::to_string(queue_.waiting()) +
                                                     " jobs already wait (jobs.max_queued); wait for some to finish");
  }
  std::string id = "job-" + std::to_string(next_number_++);
  std::string dir = job_dir(id);
  if (::mkdir(dir.c_str(), 0755) != 0) return Status::from_errno(errno, "cannot create the job dir " + dir);
  if (::rename(incoming_dir.c_str(), (dir + "/work").c_str()) != 0) {
    Status status = Status::from_errno(errno, "cannot move the inputs into " + dir + "/work");
    ::rmdir(dir.c_str());
    return status;
  }
  ::mkdir((dir + "/work/out").c_str(), 0755);
  auto job = std::make_unique<Job>();
  job->id = id;
  job->spec = std::move(spec);
  job->submitted_unix = unix_now();
  // The job starts before the journal's fsync (submit → start latency); the
  // reply waits for it, so an acknowledged submission is always durable.
  journal({{"event", "submitted"}, {"job", id}, {"spec", job->spec.to_json()}, {"submitted_unix", job->submitted_unix}}, false);
  Job& added = *jobs_.emplace(id, std::move(job)).first->second;
  queue_.push(id);
  start_ready_locked();
  changed_.notify_all();
  json info = info_locked(added);
  // The fsync runs without the lock, so the event loop's exit callbacks never wait for the disk.
  lock.unlock();
  sync_journal();
  return info;
}

void JobManager::start_ready_locked() {
  while (auto id = queue_.pop_startable()) {
    auto it = jobs_.find(*id);
    if (it != jobs_.end()) start_locked(*it->second);
  }
}

void JobManager::start_locked(Job& job) {
  std::string dir = job_dir(job.id);
  std::string work = dir + "/work";
  Fd out = open_log(dir + "/stdout.log");
  Fd err = open_log(dir + "/stderr.log");
  Fd null_in(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  job.cgroup = JobCgroup::create(job.id, job.spec.memory_limit_bytes);

  std::vector<std::pair<std::string, std::string>> env = host_.child_env;
  env.insert(env.end(), job.spec.env.begin(), job.spec.env.end());
  env.insert(env.end(), job.spec.secrets.begin(), job.spec.secrets.end());
  env.emplace_back("GPUBOX_JOB_ID", job.id);
  env.emplace_back("GPUBOX_OUT", work + "/out");
  SpawnOptions spawn;
  spawn.argv = {"/bin/sh", "-c", job.spec.command};
  if (job.cgroup && !job.cgroup->dir().empty()) {
    // The shell moves itself into the job's cgroup before it runs the command,
    // so that nothing the command forks starts outside it (a move after the
    // spawn would race with the command's first fork).
    spawn.argv = {"/bin/sh", "-c", "echo 0 > \"$0\" 2>/dev/null; exec /bin/sh -c \"$1\"",
                  job.cgroup->dir() + "/cgroup.procs", job.spec.command};
  }
  spawn.env = build_environment(env, {"GPUBOX_CONFIG"});
  spawn.cwd = work;
  spawn.new_session = true;
  spawn.stdin_fd = null_in.get();
  spawn.stdout_fd = out.get();
  spawn.stderr_fd = err.get();
  Result<pid_t> pid = Status(ErrorCode::internal, "cannot open the job's log files in " + dir);
  if (out.valid() && err.valid() && null_in.valid()) {
    std::string id = job.id;
    pid = host_.launcher->spawn(spawn, [this, id](pid_t, ExitStatus status) { on_exit(id, status); });
  }
  job.started_at = Clock::now();
  job.started_unix = unix_now();
  if (!pid) {
    job.ending.spawn_error = pid.status().message();
    queue_.finished(job.id);
    queue_staging_locked(job);
    return;
  }
  job.pid = *pid;
  job.ending.started = true;
  job.state = JobState::running;
  if (job.cgroup) job.cgroup->add(job.pid);
  if (job.spec.memory_limit_bytes && job.cgroup && !job.cgroup->limited()) {
    log::warn("job memory limit not applied", {{"job", job.id}, {"reason", job.cgroup->limit_error()}});
  }
  if (job.spec.timeout_s) {
    job.effective_timeout_s = *job.spec.timeout_s;
  } else if (host_.harvest_at) {
    job.effective_timeout_s = std::max(0.0, seconds_between(job.started_at, *host_.harvest_at));
  }
  json started = {{"event", "started"}, {"job", job.id}, {"pid", job.pid}, {"started_unix", *job.started_unix}};
  if (job.cgroup && !job.cgroup->dir().empty()) started["cgroup"] = job.cgroup->dir();
  journal(std::move(started), false);
  if (job.spec.timeout_s) {
    // The default timeout is the harvest watchdog itself, so deadline_fired names it.
    auto delay = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(*job.spec.timeout_s));
    std::string id = job.id;
    host_.post([this, id, delay] {
      auto timer = host_.timers->schedule(delay, [this, id] {
        MutexLock lock(mutex_);
        auto it = jobs_.find(id);
        if (it == jobs_.end()) return;
        it->second->timeout_timer = 0;
        if (it->second->state == JobState::running) stop_locked(*it->second, StopReason::job_timeout);
      });
      MutexLock lock(mutex_);
      auto it = jobs_.find(id);
      if (it != jobs_.end() && it->second->state == JobState::running) it->second->timeout_timer = timer;
      else host_.timers->cancel(timer);
    });
  }
  log::info("job started", {{"job", job.id}, {"pid", static_cast<int>(job.pid)}});
  if (host_.on_activity) host_.on_activity();
  changed_locked(job);
}

void JobManager::stop_locked(Job& job, StopReason reason) {
  if (job.state == JobState::queued) {
    queue_.remove_waiting(job.id);
    job.ending.stop = reason;
    journal({{"event", "stopping"}, {"job", job.id}, {"reason", stop_reason_name(reason)}});
    queue_staging_locked(job);
    return;
  }
  if (job.state != JobState::running) return;
  job.ending.stop = reason;
  job.state = JobState::stopping;
  journal({{"event", "stopping"}, {"job", job.id}, {"reason", stop_reason_name(reason)}});
  log::info("job stopping", {{"job", job.id}, {"reason", stop_reason_name(reason)}});
  host_.launcher->signal_group(job.pid, SIGTERM);
  std::string id = job.id;
  auto grace = config_.grace;
  host_.post([this, id, grace] {
    auto timer = host_.timers->schedule(grace, [this, id] { on_grace_over(id); });
    MutexLock lock(mutex_);
    auto it = jobs_.find(id);
    if (it != jobs_.end() && it->second->state == JobState::stopping) it->second->grace_timer = timer;
    else host_.timers->cancel(timer);
  });
  changed_locked(job);
}

void JobManager::on_grace_over(const std::string& id) {
  MutexLock lock(mutex_);
  auto it = jobs_.find(id);
  if (it == jobs_.end() || it->second->state != JobState::stopping) return;
  Job& job = *it->second;
  job.grace_timer = 0;
  job.ending.killed_after_grace = true;
  log::warn("job outlived its grace: killing its process group", {{"job", id}});
  host_.launcher->signal_group(job.pid, SIGKILL);
}

void JobManager::on_exit(const std::string& id, ExitStatus status) {
  MutexLock lock(mutex_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  Job& job = *it->second;
  // Whatever the job left running in its group goes with it, before staging reads out/.
  host_.launcher->signal_group(job.pid, SIGKILL);
  if (job.timeout_timer) host_.timers->cancel(job.timeout_timer);
  if (job.grace_timer) host_.timers->cancel(job.grace_timer);
  job.timeout_timer = job.grace_timer = 0;
  job.ending.exit_code = status.code;
  job.ending.signal = status.signal;
  job.ending.cpu_s = status.cpu_s;
  job.ended_at = Clock::now();
  job.ended_unix = unix_now();
  // Whatever the ending: the OOM killer may have taken the job's main process
  // (SIGKILL) or one of its children (the shell then exits 137, say).
  if (job.cgroup) {
    auto kills = job.cgroup->oom_kills_since_start();
    if (kills && *kills > 0) {
      job.ending.oom_killed = true;
      job.ending.oom_evidence = job.cgroup->evidence();
    } else if (kills && status.signal == SIGKILL) {
      job.ending.oom_ruled_out = "its cgroup's oom_kill counter did not rise";
    }
  }
  job.ending.work_disk_full = disk_full(job_dir(id) + "/work");
  // Written now, fsynced by the stager thread before it stages: PID 1's event loop never waits for the disk.
  journal({{"event", "exited"}, {"job", id}, {"exit_code", status.signal ? json() : json(status.code)},
           {"signal", status.signal ? json(status.signal) : json()}, {"oom_killed", job.ending.oom_killed}},
          false);
  log::info("job ended", {{"job", id}, {"status", status.describe()}});
  queue_.finished(id);
  queue_staging_locked(job);
  start_ready_locked();
  if (host_.on_activity) host_.on_activity();
}

void JobManager::queue_staging_locked(Job& job) {
  job.state = JobState::staging;
  to_stage_.push_back(job.id);
  changed_locked(job);
}

void JobManager::changed_locked(Job& job) {
  ++job.version;
  changed_.notify_all();
}

void JobManager::stager_loop() {
  MutexLock lock(mutex_);
  while (true) {
    changed_.wait(lock, [this]() REQUIRES(mutex_) { return stager_stop_ || !to_stage_.empty(); });
    if (to_stage_.empty()) return;  // stopping, nothing left
    std::string id = std::move(to_stage_.front());
    to_stage_.pop_front();
    lock.unlock();
    sync_journal();  // the "exited" (and any "started") events written on the event loop
    stage(id);
    lock.lock();
    finish_shutdown_if_done_locked();
  }
}

void JobManager::stage(const std::string& id) {
  StageRequest request;
  Ending ending;
  JobSpec spec;
  double wall = 0;
  {
    MutexLock lock(mutex_);
    const Job& job = *jobs_.at(id);
    ending = job.ending;
    spec = job.spec;
    if (job.ending.started && !job.ending.lost) wall = seconds_between(job.started_at, job.ended_at);
  }
  std::string dir = job_dir(id);
  std::string staged = staged_dir(id);
  ::mkdir(staged.c_str(), 0755);
  request.out_dir = dir + "/work/out";
  request.stdout_log = dir + "/stdout.log";
  request.stderr_log = dir + "/stderr.log";
  request.archive_path = staged + "/archive.tar.zst";
  request.compression_level = config_.compression_level;
  request.compression_threads = config_.compression_threads;
  auto started = Clock::now();
  StageOutcome outcome = stage_outputs(request);
  double staging_s = seconds_between(started, Clock::now());

  JobResult result = classify(ending, outcome.summary);
  result.job_wall_s = wall;
  if (ending.started && !ending.lost && ending.cpu_s >= 0) result.job_cpu_s = ending.cpu_s;
  result.stdout_tail = read_tail(request.stdout_log, kLogTailBytes);
  result.stderr_tail = read_tail(request.stderr_log, kLogTailBytes);
  // Without output rules every file is featured, the first kDefaultFeaturedFiles of them.
  const bool feature_all = spec.outputs.empty();
  for (const auto& path : outcome.summary.output_files) {
    bool hidden = false, featured = feature_all && result.featured_files.size() < kDefaultFeaturedFiles;
    for (const auto& rule : spec.outputs) {
      if (!glob_matches(rule.glob, path)) continue;
      (rule.featured ? featured : hidden) = true;
    }
    if (featured) result.featured_files.push_back(path);
    if (!hidden || featured) result.output_files.push_back(path);
  }
  json manifest = outcome.manifest.to_json();
  if (!outcome.summary.archive_written) manifest["archive"] = nullptr;
  (void)write_json_file(staged + "/manifest.json", manifest);
  (void)write_json_file(staged + "/result.json", result.to_json());

  MutexLock lock(mutex_);
  Job& job = *jobs_.at(id);
  job.result = result;
  job.manifest = manifest;
  job.state = JobState::finished;
  job.cgroup.reset();
  journal({{"event", "finished"}, {"job", id}, {"result", result.to_json()}, {"manifest", manifest}});
  log::info("job staged", {{"job", id}, {"status", job_status_name(result.status)},
                           {"archive_bytes", static_cast<long long>(outcome.manifest.archive_size)},
                           {"staging_s", staging_s}});
  changed_locked(job);
}

json JobManager::info_locked(const Job& job) const {
  json info = {{"job_id", job.id},
               {"state", job_state_name(job.state)},
               {"version", job.version},
               {"command", job.spec.command},
               {"intent", job.spec.intent},
               {"submitted_at", job.submitted_unix},
               {"acked", job.acked}};
  if (job.state == JobState::queued) info["queue_position"] = queue_.position(job.id);
  if (job.started_unix) info["started_at"] = *job.started_unix;
  if (job.ended_unix) info["ended_at"] = *job.ended_unix;
  if (job.pid && (job.state == JobState::running || job.state == JobState::stopping)) info["pid"] = job.pid;
  if (job.effective_timeout_s) info["timeout_s"] = *job.effective_timeout_s;
  if (job.ending.stop != StopReason::none && job.state != JobState::finished) {
    info["stopping_for"] = stop_reason_name(job.ending.stop);
  }
  if (auto wall = wall_seconds(job)) info["wall_s"] = *wall;
  if (job.result && job.result->job_cpu_s) info["cpu_s"] = *job.result->job_cpu_s;
  if (job.result) {
    info["result"] = job.result->to_json();
    info["status"] = job_status_name(job.result->status);
    if (!job.acked && job.manifest.is_object() && job.manifest["archive"].is_object()) {
      info["archive"] = {{"size", job.manifest["archive"]["size"]}, {"sha256", job.manifest["archive"]["sha256"]}};
    }
  }
  if (!job.persisted_to.empty()) info["persisted_to"] = job.persisted_to;
  return info;
}

Result<json> JobManager::info(const std::string& id) const {
  MutexLock lock(mutex_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return Status(ErrorCode::not_found, "params.job_id: no job " + id + " (job.list lists them)");
  return info_locked(*it->second);
}

std::optional<double> JobManager::wall_seconds(const Job& job) {
  if (job.result) return job.result->job_wall_s;
  if (!job.ending.started || job.ending.lost) return std::nullopt;
  if (job.state == JobState::running || job.state == JobState::stopping) return seconds_between(job.started_at, Clock::now());
  return seconds_between(job.started_at, job.ended_at);  // staging: ended, result not written yet
}

json JobManager::usage() const {
  MutexLock lock(mutex_);
  json jobs = json::array();
  for (const auto& [id, job] : jobs_) {
    auto wall = wall_seconds(*job);
    json entry = {{"job_id", id}, {"state", job_state_name(job->state)}, {"wall_s", wall ? json(*wall) : json()}, {"cpu_s", nullptr}};
    if (job->result && job->result->job_cpu_s) {
      entry["cpu_s"] = *job->result->job_cpu_s;
    } else if (job->state != JobState::queued && job->ending.started && !job->ending.lost && job->ending.cpu_s >= 0) {
      entry["cpu_s"] = job->ending.cpu_s;  // exited, being staged
    }
    if (job->pid && (job->state == JobState::running || job->state == JobState::stopping)) entry["session"] = job->pid;
    jobs.push_back(std::move(entry));
  }
  auto number = [](const json& entry) {
    const std::string& id = entry["job_id"].get_ref<const std::string&>();
    return id.size() > 4 ? std::strtoll(id.c_str() + 4, nullptr, 10) : 0;
  };
  std::stable_sort(jobs.begin(), jobs.end(), [&](const json& a, const json& b) { return number(a) < number(b); });
  return jobs;
}

json JobManager::list() const {
  MutexLock lock(mutex_);
  json jobs = json::array();
  for (const auto& [id, job] : jobs_) {
    json entry = info_locked(*job);
    if (entry.contains("result")) {
      entry["result"].erase("stdout_tail");
      entry["result"].erase("stderr_tail");
    }
    jobs.push_back(std::move(entry));
  }
  // Submission order (ids sort as strings: job-10 before job-2).
  auto number = [](const json& entry) {
    const std::string& id = entry["job_id"].get_ref<const std::string&>();
    return id.size() > 4 ? std::strtoll(id.c_str() + 4, nullptr, 10) : 0;
  };
  std::stable_sort(jobs.begin(), jobs.end(), [&](const json& a, const json& b) { return number(a) < number(b); });
  return json{{"jobs", std::move(jobs)}};
}

Result<json> JobManager::wait_change(const std::string& id, std::uint64_t after_version, Clock::time_point deadline,
                                     const std::function<bool()>& stopped) const {
  MutexLock lock(mutex_);
  while (true) {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return Status(ErrorCode::not_found, "params.job_id: no job " + id + " (job.list lists them)");
    const Job& job = *it->second;
    if (job.version > after_version || job.state == JobState::finished) return info_locked(job);
    auto now = Clock::now();
    if (now >= deadline) return info_locked(job);
    if (stopped && stopped()) return Status(ErrorCode::cancelled, "the wait was cancelled");
    changed_.wait_until(lock, std::min(deadline, now + std::chrono::milliseconds(200)));
  }
}

Result<json> JobManager::cancel(const std::string& id) {
  MutexLock lock(mutex_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return Status(ErrorCode::not_found, "params.job_id: no job " + id + " (job.list lists them)");
  Job& job = *it->second;
  if (job.state == JobState::queued || job.state == JobState::running) stop_locked(job, StopReason::cancel);
  return info_locked(job);
}

Result<json> JobManager::ack(const std::string& id) {
  std::string dir, staged;
  {
    MutexLock lock(mutex_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return Status(ErrorCode::not_found, "params.job_id: no job " + id + " (job.list lists them)");
    Job& job = *it->second;
    if (job.state != JobState::finished) {
      return Status(ErrorCode::busy, "job " + id + " is " + job_state_name(job.state) +
                                         "; only a finished job's staged copy can be acknowledged");
    }
    if (job.acked) return info_locked(job);
    job.acked = true;
    journal({{"event", "acked"}, {"job", id}});
    changed_locked(job);
    dir = job_dir(id);
    staged = staged_dir(id);
  }
  std::error_code error;
  stdfs::remove_all(staged, error);
  stdfs::remove_all(dir, error);
  return info(id);
}

Result<StagedArchive> JobManager::staged_archive(const std::string& id) const {
  MutexLock lock(mutex_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return Status(ErrorCode::not_found, "params.job_id: no job " + id + " (job.list lists them)");
  const Job& job = *it->second;
  if (job.state != JobState::finished) {
    return Status(ErrorCode::busy, "job " + id + " is " + job_state_name(job.state) + "; job.wait until it is finished");
  }
  if (job.acked) return Status(ErrorCode::not_found, "job " + id + " was acknowledged (job.ack): its staged copy is deleted");
  if (!job.manifest.is_object() || !job.manifest["archive"].is_object()) {
    std::string why = job.result ? job.result->system_hint : "";
    return Status(ErrorCode::not_found, "job " + id + " has no staged archive: " + why);
  }
  StagedArchive archive;
  archive.path = staged_dir(id) + "/archive.tar.zst";
  archive.size = job.manifest["archive"].value("size", std::uint64_t{0});
  archive.sha256 = job.manifest["archive"].value("sha256", "");
  archive.manifest = job.manifest;
  return archive;
}

Result<std::pair<std::string, bool>> JobManager::log_file(const std::string& id, const std::string& stream) const {
  if (stream != "stdout" && stream != "stderr") {
    return Status(ErrorCode::invalid_request, "params.stream: expected \"stdout\" or \"stderr\", got \"" + stream.substr(0, 40) + "\"");
  }
  MutexLock lock(mutex_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return Status(ErrorCode::not_found, "params.job_id: no job " + id + " (job.list lists them)");
  const Job& job = *it->second;
  if (job.acked) return Status(ErrorCode::not_found, "job " + id + " was acknowledged (job.ack): its logs are deleted");
  bool live = job.state == JobState::queued || job.state == JobState::running || job.state == JobState::stopping;
  return std::pair{job_dir(id) + "/" + stream + ".log", live};
}

void JobManager::stop_all(StopReason reason, const std::string& refusal) {
  MutexLock lock(mutex_);
  if (refusal_.empty()) refusal_ = refusal;
  for (const auto& id : queue_.drain_waiting()) {
    Job& job = *jobs_.at(id);
    job.ending.stop = reason;
    journal({{"event", "stopping"}, {"job", id}, {"reason", stop_reason_name(reason)}});
    queue_staging_locked(job);
  }
  for (auto& [id, job] : jobs_) {
    if (job->state == JobState::running) stop_locked(*job, reason);
  }
}

void JobManager::begin_shutdown(StopReason reason, const std::string& persist_dir, std::function<void()> done) {
  stop_all(reason, "the agent is shutting down; no new jobs start");
  MutexLock lock(mutex_);
  shutting_down_ = true;
  persist_dir_ = persist_dir;
  shutdown_done_ = std::move(done);
  finish_shutdown_if_done_locked();
}

bool JobManager::busy() const {
  MutexLock lock(mutex_);
  for (const auto& [id, job] : jobs_) {
    if (job->state != JobState::finished) return true;
  }
  return false;
}

bool JobManager::shut_down() const {
  MutexLock lock(mutex_);
  return shut_down_;
}

void JobManager::finish_shutdown_if_done_locked() {
  if (!shutting_down_ || shut_down_) return;
  for (const auto& [id, job] : jobs_) {
    if (job->state != JobState::finished) return;
  }
  if (!persist_dir_.empty()) persist_unacked_locked(persist_dir_);
  shut_down_ = true;
  log::info("every job is staged");
  if (shutdown_done_) host_.post(std::move(shutdown_done_));
}

void JobManager::persist_unacked_locked(const std::string& dir) {
  for (auto& [id, job] : jobs_) {
    if (job->acked || job->state != JobState::finished || !job->persisted_to.empty()) continue;
    std::string target = dir + "/" + id;
    std::error_code error;
    stdfs::create_directories(target, error);
    for (const char* name : {"archive.tar.zst", "manifest.json", "result.json"}) {
      std::string from = staged_dir(id) + "/" + name;
      if (!error && stdfs::exists(from)) {
        stdfs::copy_file(from, target + "/" + name, stdfs::copy_options::overwrite_existing, error);
      }
    }
    if (error) {
      log::error("cannot copy a staged archive to the persistent dir", {{"job", id}, {"error", error.message()}});
      journal({{"event", "persist_failed"}, {"job", id}, {"path", target}, {"error", error.message()}});
      continue;
    }
    int fd = ::open(target.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
      ::fsync(fd);
      ::close(fd);
    }
    job->persisted_to = target;
    journal({{"event", "persisted"}, {"job", id}, {"path", target}});
    log::info("staged archive persisted", {{"job", id}, {"path", target}});
    changed_locked(*job);
  }
}

}  // namespace gpubox::jobs
