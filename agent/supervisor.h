// Supervisor: keeps declared children running under their restart policy,
// with exponential backoff, and marks a child failed after too many restarts
// within its window. Belongs to the event-loop thread: every method and every
// callback runs there.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "agent/config.h"
#include "agent/process_table.h"
#include "agent/timers.h"

namespace gpubox {

enum class ChildState {
  stopped,   // never started, or stopped on request
  running,   // a process is alive
  backoff,   // waiting to be restarted
  stopping,  // TERM sent, waiting for it to exit (KILL after the grace)
  exited,    // ended on its own and its policy says not to restart
  failed,    // restarted too often within its window; given up
};
std::string_view child_state_name(ChildState state);

struct ChildInfo {
  std::string name;
  ChildState state = ChildState::stopped;
  pid_t pid = 0;              // while running or stopping
  int restarts = 0;           // restarts since the last start() or restart()
  std::optional<ExitStatus> last_exit;
  std::string last_error;     // why the last start failed, if it did
};

class Supervisor {
 public:
  using ChangeCallback = std::function<void(const ChildInfo&)>;

  // common_env is added to every child's environment (before its own env);
  // remove_env names variables of the agent's environment children must not see.
  Supervisor(ProcessLauncher& launcher, Timers& timers, std::chrono::milliseconds stop_grace,
             std::vector<std::pair<std::string, std::string>> common_env = {},
             std::vector<std::string> remove_env = {});
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;
  ~Supervisor();

  Status add(ChildSpec spec);
  Status start(const std::string& name);
  // TERM to the child's process group, KILL after the grace; not restarted.
  Status stop(const std::string& name);
  // Stops the child if it runs, then starts it with a fresh restart count.
  Status restart(const std::string& name);
  // Stops every child and stops restarting; calls done once none is running.
  void stop_all(std::function<void()> done);
  // KILL to every child still running or stopping.
  void kill_all();

  std::optional<ChildInfo> info(const std::string& name) const;
  std::vector<ChildInfo> list() const;
  // Called after every state change.
  void on_change(ChangeCallback callback) { on_change_ = std::move(callback); }

 private:
  struct Child {
    ChildSpec spec;
    ChildInfo info;
    std::deque<Timers::Clock::time_point> restart_times;  // within the window
    Timers::TimerId timer = 0;                            // backoff or kill timer
    bool start_after_stop = false;
    std::uint64_t generation = 0;  // distinguishes exits of earlier processes
  };

  Child* find(const std::string& name);
  void launch(Child& child);
  void on_exit(const std::string& name, std::uint64_t generation, ExitStatus status);
  void after_failure(Child& child);
  void set_state(Child& child, ChildState state);
  void begin_stop(Child& child);
  void cancel_timer(Child& child);
  void check_all_stopped();

  ProcessLauncher& launcher_;
  Timers& timers_;
  std::chrono::milliseconds stop_grace_;
  std::vector<std::pair<std::string, std::string>> common_env_;
  std::vector<std::string> remove_env_;
  std::map<std::string, Child> children_;
  ChangeCallback on_change_;
  bool shutting_down_ = false;
  std::function<void()> all_stopped_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // guards callbacks after destruction
};

}  // namespace gpubox
