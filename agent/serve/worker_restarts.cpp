#include "agent/serve/worker_restarts.h"

namespace gpubox::serve {

// The Supervisor's launcher: starts through the real one, and hands each end
// to the WorkerRestarts before the Supervisor hears of it.
class WorkerRestarts::Relay final : public ProcessLauncher {
 public:
  Relay(WorkerRestarts& owner, ProcessLauncher& launcher) : owner_(owner), launcher_(launcher) {}
  ~Relay() override { *alive_ = false; }

  Result<pid_t> spawn(const SpawnOptions& options, ExitCallback on_exit) override {
    std::weak_ptr<bool> alive = alive_;
    return launcher_.spawn(options, [this, alive, on_exit = std::move(on_exit)](pid_t pid, ExitStatus status) {
      if (alive.expired()) return;
      owner_.before_exit(pid);
      on_exit(pid, status);
    });
  }
  bool signal_group(pid_t pgid, int sig) override {
    if (pgid == owner_.ending_) return false;
    return launcher_.signal_group(pgid, sig);
  }

 private:
  WorkerRestarts& owner_;
  ProcessLauncher& launcher_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // guards exits reported after destruction
};

namespace {

ChildSpec worker_spec(const std::string& name, int restart_limit) {
  ChildSpec spec;
  spec.name = name;
  spec.restart = RestartPolicy::always;  // any end of a loaded worker, even a clean exit
  spec.backoff_initial = WorkerRestarts::kBackoffFirst;
  spec.backoff_max = WorkerRestarts::kBackoffMax;
  spec.max_restarts = restart_limit;
  // restart_limit counts every restart of the service's life: a window that never closes.
  spec.restart_window = std::chrono::duration_cast<std::chrono::milliseconds>(Timers::Clock::duration::max());
  return spec;
}

}  // namespace

WorkerRestarts::WorkerRestarts(const std::string& name, ProcessLauncher& launcher, Timers& timers, int restart_limit,
                               std::chrono::milliseconds stop_grace)
    : name_(name),
      relay_(std::make_unique<Relay>(*this, launcher)),
      supervisor_(*relay_, timers, stop_grace) {
  (void)supervisor_.add(worker_spec(name_, restart_limit));
  supervisor_.on_change([this](const ChildInfo& child) { changed(child); });
}

WorkerRestarts::~WorkerRestarts() = default;

void WorkerRestarts::start() {
  (void)supervisor_.start(name_);
  // The first worker could not start: the Supervisor waits to retry, which the first never gets.
  if (!loaded_ && view().state == ChildState::backoff) (void)supervisor_.stop(name_);
}

void WorkerRestarts::loaded() { loaded_ = true; }

void WorkerRestarts::hold() {
  held_ = true;
  if (view().state == ChildState::backoff) (void)supervisor_.stop(name_);
}

void WorkerRestarts::stop() { (void)supervisor_.stop(name_); }

bool WorkerRestarts::idle() const {
  ChildState state = view().state;
  return state != ChildState::running && state != ChildState::stopping;
}

WorkerRestarts::View WorkerRestarts::view() const {
  auto child = supervisor_.info(name_);
  return child ? view_of(*child) : View{};
}

WorkerRestarts::View WorkerRestarts::view_of(const ChildInfo& child) const {
  View view;
  view.state = child.state;
  // The Supervisor counts the restarts it made; serve.list counts the end it gave up on too.
  view.restarts = child.restarts + (child.state == ChildState::failed ? 1 : 0);
  return view;
}

void WorkerRestarts::before_exit(pid_t pid) {
  auto child = supervisor_.info(name_);
  if (!child || child->pid != pid || child->state != ChildState::running) return;
  if (loaded_ && !held_) return;
  ending_ = pid;
  (void)supervisor_.stop(name_);
  ending_ = 0;
}

void WorkerRestarts::changed(const ChildInfo& child) {
  // start()'s first worker that could not start: stopped right after, never restarted.
  if (child.state == ChildState::backoff && !loaded_) return;
  if (on_change_) on_change_(view_of(child));
}

}  // namespace gpubox::serve
