#include "agent/supervisor.h"

#include <signal.h>

#include <algorithm>

namespace gpubox {

std::string_view child_state_name(ChildState state) {
  switch (state) {
    case ChildState::stopped: return "stopped";
    case ChildState::running: return "running";
    case ChildState::backoff: return "backoff";
    case ChildState::stopping: return "stopping";
    case ChildState::exited: return "exited";
    case ChildState::failed: return "failed";
  }
  return "stopped";
}

Supervisor::Supervisor(ProcessLauncher& launcher, Timers& timers, std::chrono::milliseconds stop_grace,
                       std::vector<std::pair<std::string, std::string>> common_env,
                       std::vector<std::string> remove_env)
    : launcher_(launcher),
      timers_(timers),
      stop_grace_(stop_grace),
      common_env_(std::move(common_env)),
      remove_env_(std::move(remove_env)) {}

Supervisor::~Supervisor() {
  *alive_ = false;
  for (auto& [name, child] : children_) cancel_timer(child);
}

Status Supervisor::add(ChildSpec spec) {
  if (children_.count(spec.name)) {
    return Status(ErrorCode::already_exists, "child '" + spec.name + "' is already declared");
  }
  std::string name = spec.name;
  Child child;
  child.info.name = name;
  child.spec = std::move(spec);
  children_.emplace(name, std::move(child));
  return Status::ok();
}

Supervisor::Child* Supervisor::find(const std::string& name) {
  auto it = children_.find(name);
  return it == children_.end() ? nullptr : &it->second;
}

Status Supervisor::start(const std::string& name) {
  Child* child = find(name);
  if (!child) return Status(ErrorCode::not_found, "no child named '" + name + "'");
  if (shutting_down_) return Status(ErrorCode::unavailable, "the agent is shutting down");
  switch (child->info.state) {
    case ChildState::running:
    case ChildState::backoff:
      return Status::ok();
    case ChildState::stopping:
      child->start_after_stop = true;
      return Status::ok();
    default:
      break;
  }
  child->info.restarts = 0;
  child->restart_times.clear();
  launch(*child);
  return Status::ok();
}

void Supervisor::launch(Child& child) {
  cancel_timer(child);
  std::vector<std::pair<std::string, std::string>> env = common_env_;
  for (const auto& kv : child.spec.env) env.emplace_back(kv);
  SpawnOptions options;
  options.argv = child.spec.argv;
  options.env = build_environment(env, remove_env_);
  options.cwd = child.spec.cwd;
  std::uint64_t generation = ++child.generation;
  std::weak_ptr<bool> alive = alive_;
  std::string name = child.info.name;
  auto spawned = launcher_.spawn(options, [this, alive, name, generation](pid_t, ExitStatus status) {
    if (!alive.expired()) on_exit(name, generation, status);
  });
  if (!spawned) {
    child.info.pid = 0;
    child.info.last_error = spawned.status().message();
    log::warn("child could not start", {{"child", name}, {"error", child.info.last_error}});
    after_failure(child);
    return;
  }
  child.info.pid = *spawned;
  child.info.last_error.clear();
  log::info("child started", {{"child", name}, {"pid", static_cast<int>(*spawned)}});
  set_state(child, ChildState::running);
}

void Supervisor::on_exit(const std::string& name, std::uint64_t generation, ExitStatus status) {
  Child* child = find(name);
  if (!child || child->generation != generation) return;
  cancel_timer(*child);
  child->info.pid = 0;
  child->info.last_exit = status;
  log::info("child exited", {{"child", name}, {"status", status.describe()}});
  if (child->info.state == ChildState::stopping) {
    set_state(*child, ChildState::stopped);
    if (child->start_after_stop && !shutting_down_) {
      child->start_after_stop = false;
      child->info.restarts = 0;
      child->restart_times.clear();
      launch(*child);
    }
    check_all_stopped();
    return;
  }
  bool restart = child->spec.restart == RestartPolicy::always ||
                 (child->spec.restart == RestartPolicy::on_failure && !status.success());
  if (!restart || shutting_down_) {
    set_state(*child, ChildState::exited);
    check_all_stopped();
    return;
  }
  after_failure(*child);
}

void Supervisor::after_failure(Child& child) {
  auto now = timers_.now();
  while (!child.restart_times.empty() && now - child.restart_times.front() >= child.spec.restart_window) {
    child.restart_times.pop_front();
  }
  int recent = static_cast<int>(child.restart_times.size());
  if (recent >= child.spec.max_restarts || child.spec.restart == RestartPolicy::never) {
    log::error("child failed: gave up restarting",
               {{"child", child.info.name}, {"restarts_in_window", recent}});
    set_state(child, ChildState::failed);
    return;
  }
  child.restart_times.push_back(now);
  ++child.info.restarts;
  // backoff_initial × 2^recent, capped at backoff_max (and before the shift overflows).
  std::chrono::milliseconds delay = child.spec.backoff_max;
  if (recent < 31) delay = std::min<std::chrono::milliseconds>(child.spec.backoff_initial * (1L << recent), delay);
  set_state(child, ChildState::backoff);
  std::string name = child.info.name;
  std::uint64_t generation = child.generation;
  child.timer = timers_.schedule(delay, [this, name, generation] {
    Child* c = find(name);
    if (!c || c->generation != generation || c->info.state != ChildState::backoff) return;
    c->timer = 0;
    launch(*c);
  });
}

Status Supervisor::stop(const std::string& name) {
  Child* child = find(name);
  if (!child) return Status(ErrorCode::not_found, "no child named '" + name + "'");
  child->start_after_stop = false;
  begin_stop(*child);
  return Status::ok();
}

void Supervisor::begin_stop(Child& child) {
  switch (child.info.state) {
    case ChildState::running: {
      launcher_.signal_group(child.info.pid, SIGTERM);
      set_state(child, ChildState::stopping);
      pid_t pid = child.info.pid;
      std::string name = child.info.name;
      cancel_timer(child);
      child.timer = timers_.schedule(stop_grace_, [this, name, pid] {
        Child* c = find(name);
        if (!c || c->info.state != ChildState::stopping || c->info.pid != pid) return;
        c->timer = 0;
        log::warn("child ignored TERM for the whole grace; killing it", {{"child", name}, {"pid", static_cast<int>(pid)}});
        launcher_.signal_group(pid, SIGKILL);
      });
      break;
    }
    case ChildState::backoff:
      cancel_timer(child);
      set_state(child, ChildState::stopped);
      break;
    default:
      break;
  }
}

Status Supervisor::restart(const std::string& name) {
  Child* child = find(name);
  if (!child) return Status(ErrorCode::not_found, "no child named '" + name + "'");
  if (shutting_down_) return Status(ErrorCode::unavailable, "the agent is shutting down");
  if (child->info.state == ChildState::running || child->info.state == ChildState::stopping) {
    begin_stop(*child);
    child->start_after_stop = true;
    return Status::ok();
  }
  cancel_timer(*child);
  child->info.restarts = 0;
  child->restart_times.clear();
  launch(*child);
  return Status::ok();
}

void Supervisor::stop_all(std::function<void()> done) {
  shutting_down_ = true;
  all_stopped_ = std::move(done);
  for (auto& [name, child] : children_) {
    child.start_after_stop = false;
    begin_stop(child);
  }
  check_all_stopped();
}

void Supervisor::kill_all() {
  for (auto& [name, child] : children_) {
    if (child.info.pid > 0) launcher_.signal_group(child.info.pid, SIGKILL);
  }
}

void Supervisor::check_all_stopped() {
  if (!all_stopped_) return;
  for (const auto& [name, child] : children_) {
    if (child.info.state == ChildState::running || child.info.state == ChildState::stopping) return;
  }
  auto done = std::move(all_stopped_);
  all_stopped_ = nullptr;
  done();
}

void Supervisor::set_state(Child& child, ChildState state) {
  child.info.state = state;
  if (on_change_) on_change_(child.info);
}

void Supervisor::cancel_timer(Child& child) {
  if (child.timer) timers_.cancel(child.timer);
  child.timer = 0;
}

std::optional<ChildInfo> Supervisor::info(const std::string& name) const {
  auto it = children_.find(name);
  if (it == children_.end()) return std::nullopt;
  return it->second.info;
}

std::vector<ChildInfo> Supervisor::list() const {
  std::vector<ChildInfo> infos;
  for (const auto& [name, child] : children_) infos.push_back(child.info);
  return infos;
}

}  // namespace gpubox
