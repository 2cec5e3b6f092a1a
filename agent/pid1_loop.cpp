// Agent's PID-1 loop: prepares the process (subreaper or PID 1, OOM score,
// seccomp, state dir and log), runs the event loop with its signals, and
// shuts down in order, leaving the exit record. The parts it runs are wired
// in agent.cpp.
#include "agent/agent.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <set>

#include "agent/signals.h"

namespace gpubox {

void Agent::on_watchdog(WatchdogShutdown reason) {
  jobs::StopReason job_reason = reason == WatchdogShutdown::idle    ? jobs::StopReason::idle
                                : reason == WatchdogShutdown::lease ? jobs::StopReason::lease
                                                                    : jobs::StopReason::container_deadline;
  const char* end = reason == WatchdogShutdown::idle    ? "idle_timeout"
                    : reason == WatchdogShutdown::lease ? "lease_expired"
                                                        : "deadline";
  begin_shutdown(end, "watchdog: " + watchdog_shutdown_name(reason), job_reason, true);
}

std::string Agent::host_files_dir() const {
  return options_.host_dir_fd >= 0 ? "/proc/self/fd/" + std::to_string(options_.host_dir_fd) : options_.config.state_dir;
}

Status Agent::open_state_dir() {
  std::error_code error;
  std::filesystem::create_directories(options_.config.state_dir, error);
  if (error) {
    return Status(ErrorCode::permission_denied,
                  "cannot create state_dir '" + options_.config.state_dir + "': " + error.message());
  }
  ::chmod(options_.config.state_dir.c_str(), 0700);
  log::Options log_options;
  log_options.level = options_.config.log_level;
  log_options.to_stderr = options_.config.log_stderr;
  if (options_.config.log_file) log_options.file = host_files_dir() + "/agent.log";
  std::string log_error;
  if (!log::configure(log_options, &log_error)) {
    return Status(ErrorCode::permission_denied, "cannot open the log file: " + log_error);
  }
  return Status::ok();
}

Status Agent::filter_children() {
  const SeccompSettings& seccomp = options_.config.seccomp;
  if (!seccomp.enabled) {
    log::warn("seccomp: unconfined; the processes the agent starts have no syscall filter");
    return Status::ok();
  }
  auto program = build_seccomp_program(seccomp);
  if (!program) return program.status();
  log::info("seccomp: the processes the agent starts are filtered",
            {{"instructions", static_cast<int>(program->instructions.size())}, {"namespaces_allowed", seccomp.allow_namespaces}});
  return processes_.set_child_filter(*program);
}

void Agent::shield_from_oom_killer() {
  // -1000 needs CAP_SYS_RESOURCE, which containers often lack; raising the
  // children's score needs nothing and makes them the choice all the same.
  int fd = ::open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  bool shielded = fd >= 0 && ::write(fd, "-1000", 5) == 5;
  if (fd >= 0) ::close(fd);
  int children = shielded ? 0 : 500;
  processes_.set_children_oom_score_adj(children);
  log::info("oom killer", {{"agent_oom_score_adj", shielded ? -1000 : 0}, {"children_oom_score_adj", children}});
}

int Agent::run() {
  // Not PID 1: become the child subreaper, so orphans of our children are ours to reap.
  if (!is_pid1_) ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  // PID 1 must never be the OOM killer's choice in a memory-limited sandbox:
  // its death ends the sandbox and every output not yet harvested.
  if (is_pid1_) shield_from_oom_killer();
  // The ready fd is ours alone: children must not inherit it and keep the pipe open.
  if (options_.ready_fd >= 0) ::fcntl(options_.ready_fd, F_SETFD, FD_CLOEXEC);
  // So is the host's directory: a child holding it could replace what the host reads.
  if (options_.host_dir_fd >= 0) ::fcntl(options_.host_dir_fd, F_SETFD, FD_CLOEXEC);

  Status started = open_state_dir();
  if (started) started = filter_children();
  auto loop = EventLoop::create();
  auto signal_fd = open_signal_fd();
  if (started && !loop) started = loop.status();
  if (started && !signal_fd) started = signal_fd.status();
  if (!started) {
    std::fprintf(stderr, "gpubox-agent: cannot start: %s\n", started.message().c_str());
    return kExitNoStart;
  }
  loop_ = std::move(*loop);
  signal_fd_ = std::move(*signal_fd);
  Status watched = loop_->add_fd(signal_fd_.get(), [this] { handle_signals(); });
  if (!watched) {
    std::fprintf(stderr, "gpubox-agent: cannot start: %s\n", watched.message().c_str());
    return kExitNoStart;
  }

  if (int failed = wire_parts(); failed != kExitClean) return failed;
  if (!options_.command.empty()) {
    Status main_started = start_main_command();
    if (!main_started) {
      std::fprintf(stderr, "gpubox-agent: %s\n", main_started.message().c_str());
      log::error("main command could not start", {{"error", main_started.message()}});
      log::flush();
      return main_started.code() == ErrorCode::not_found ? kExitNotFound : kExitNotExecutable;
    }
  }
  for (const auto& child : options_.config.children) {
    (void)supervisor_->add(child);
    (void)supervisor_->start(child.name);
  }
  watchdogs_->start();
  signal_ready();
  loop_->run();
  if (serve_) serve_->stop_all();  // while the server's I/O thread, which reads the workers, still runs
  server_.reset();  // answers calls still in flight before the process table goes
  modeld_.reset();
  jobs_.reset();

  log::info("agent exiting", {{"exit_code", exit_code_}, {"killed_after_grace", killed_}});
  log::flush();
  write_exit_record();
  return exit_code_;
}

void Agent::write_exit_record() const {
  nlohmann::json record = {{"reason", end_reason_}, {"detail", end_detail_}, {"exit_code", exit_code_},
                           {"ended_at", static_cast<double>(::time(nullptr))}};
  std::string path = host_files_dir() + "/exit.json";
  std::string temp = path + ".tmp";
  {
    std::ofstream out(temp, std::ios::trunc);
    out << record.dump() << "\n";
    if (!out.flush()) return;
  }
  ::rename(temp.c_str(), path.c_str());
}

Status Agent::start_main_command() {
  SpawnOptions spawn;
  spawn.argv = options_.command;
  spawn.env = build_environment(child_env(), {"GPUBOX_CONFIG"});
  auto pid = processes_.spawn(spawn, [this](pid_t, ExitStatus status) {
    main_exit_ = status;
    main_pid_ = 0;
    exit_code_ = status.shell_code();
    log::info("main command ended", {{"status", status.describe()}});
    begin_shutdown("main_command_ended", "main command ended: " + status.describe());
  });
  if (!pid) return pid.status();
  main_pid_ = *pid;
  // Give the command the terminal, as a shell would, so ^C and ^Z reach it.
  if (::isatty(STDIN_FILENO)) ::tcsetpgrp(STDIN_FILENO, main_pid_);
  log::info("main command started", {{"pid", static_cast<int>(main_pid_)}, {"argv0", options_.command[0]}});
  return Status::ok();
}

void Agent::signal_ready() {
  log::info("agent ready");
  if (options_.ready_fd < 0) return;
  static const char kReady[] = "ready\n";
  [[maybe_unused]] auto written = ::write(options_.ready_fd, kReady, sizeof kReady - 1);
  ::close(options_.ready_fd);
  options_.ready_fd = -1;
}

void Agent::handle_signals() {
  while (int sig = read_signal(signal_fd_.get())) {
    switch (signal_action(sig, main_pid_ > 0)) {
      case SignalAction::reap:
        reap();
        break;
      case SignalAction::shutdown:
        if (stopping_) {
          log::warn("second shutdown signal: skipping the rest of the grace", {{"signal", signal_name(sig)}});
          kill_everything();
        } else {
          begin_shutdown("terminated", "signal " + signal_name(sig));
        }
        break;
      case SignalAction::forward:
        forward(sig);
        break;
      case SignalAction::ignore:
        break;
    }
  }
}

void Agent::forward(int sig) {
  log::info("forwarding signal", {{"signal", signal_name(sig)}});
  if (main_pid_ > 0) {
    if (!processes_.signal_group(main_pid_, sig)) ::kill(main_pid_, sig);
    return;
  }
  for (const auto& child : supervisor_->list()) {
    if (child.pid > 0) processes_.signal_group(child.pid, sig);
  }
}

void Agent::reap() {
  processes_.reap();
  finish_if_done();
}

void Agent::begin_shutdown(std::string_view end, std::string_view reason, jobs::StopReason job_reason, bool persist) {
  if (stopping_) return;
  stopping_ = true;
  end_reason_ = end;
  end_detail_ = reason;
  accepting_work_ = false;
  log::info("shutting down", {{"reason", reason}, {"grace_ms", static_cast<long long>(options_.config.shutdown_grace.count())}});
  // Jobs first, so their results name why they were stopped; staging holds
  // the exit back until every job is staged (finish_if_done).
  jobs_->begin_shutdown(job_reason, persist ? options_.config.lifecycle.persistent_dir : "", [this] { finish_if_done(); });
  // Scheduled before stop_all() arms the supervisor's own kill timers (same
  // grace, due a moment later), so this one fires first and a KILL after the
  // grace is always counted in the exit status.
  grace_timer_ = loop_->schedule(options_.config.shutdown_grace, [this] {
    grace_timer_ = 0;
    kill_everything();
  });
  supervisor_->stop_all([] {});
  if (modeld_) modeld_->begin_stop();
  // Before the TERM below reaches the executor, so that it is not restarted.
  if (kernel_) kernel_->begin_stop();
  if (serve_) serve_->begin_stop();
  if (main_pid_ > 0) processes_.signal_group(main_pid_, SIGTERM);
  // Processes started over RPC (proc.exec, proc.spawn) are neither main nor supervised.
  std::set<pid_t> supervised;
  for (const auto& child : supervisor_->list()) supervised.insert(child.pid);
  if (modeld_) supervised.insert(modeld_->pid());
  for (pid_t pid : processes_.live_pids()) {
    if (pid != main_pid_ && !supervised.count(pid)) processes_.signal_group(pid, SIGTERM);
  }
  // As PID 1, orphans reparented to the agent (a command's `setsid x &`) are
  // in no group it knows: -1 reaches every process of the namespace.
  if (is_pid1_) ::kill(-1, SIGTERM);
  finish_if_done();
}

void Agent::kill_everything() {
  if (grace_timer_) loop_->cancel(grace_timer_);
  grace_timer_ = 0;
  processes_.reap();
  bool anything_left = is_pid1_ ? processes_.has_children() : !processes_.live_pids().empty();
  if (!anything_left) {
    finish_if_done();
    return;
  }
  killed_ = true;
  log::warn("killing what is left", {{"processes", static_cast<int>(processes_.live_pids().size())}});
  supervisor_->kill_all();
  for (pid_t pid : processes_.live_pids()) {
    processes_.signal_group(pid, SIGKILL);
    ::kill(pid, SIGKILL);
  }
  // As PID 1 of a namespace, -1 means every process in it, orphans included.
  if (is_pid1_) ::kill(-1, SIGKILL);
  finish_if_done();
}

void Agent::finish_if_done() {
  if (!stopping_) return;
  processes_.reap();
  // As PID 1, wait for every process of the namespace; as a subreaper, for ours.
  bool done = is_pid1_ ? !processes_.has_children() : processes_.live_pids().empty();
  if (!done || !jobs_->shut_down()) return;
  if (grace_timer_) loop_->cancel(grace_timer_);
  grace_timer_ = 0;
  if (!main_exit_) exit_code_ = killed_ ? kExitKilled : kExitClean;
  loop_->stop();
}

}  // namespace gpubox
