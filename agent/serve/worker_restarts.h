// WorkerRestarts: the restart policy of a served interface's worker
// (rpc/PROTOCOL.md "Served functions"), kept by a Supervisor of its own with
// one child: a worker that ends is restarted after a backoff of 100 ms
// doubling to 5 s; the end after restart_limit restarts gives up (failed); a
// first worker that never loaded its interface is not restarted at all.
// Belongs to the thread that runs its Timers (the service's own event loop,
// or a unit test's thread): every method and every callback runs there.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "agent/process_table.h"
#include "agent/supervisor.h"
#include "agent/timers.h"

namespace gpubox::serve {

class WorkerRestarts {
 public:
  static constexpr std::chrono::milliseconds kBackoffFirst{100};
  static constexpr std::chrono::milliseconds kBackoffMax{5000};

  // What serve.list shows of the supervision, after each change.
  struct View {
    ChildState state = ChildState::stopped;  // running, backoff, stopping, failed or stopped
    // The worker's ends that asked for a restart, the one given up on included.
    int restarts = 0;
  };
  using ChangeCallback = std::function<void(const View&)>;

  // launcher starts the worker and reports its end (the service's, or a
  // fake); name is the child's name in the log.
  WorkerRestarts(const std::string& name, ProcessLauncher& launcher, Timers& timers, int restart_limit,
                 std::chrono::milliseconds stop_grace);
  WorkerRestarts(const WorkerRestarts&) = delete;
  WorkerRestarts& operator=(const WorkerRestarts&) = delete;
  ~WorkerRestarts();

  // Starts the first worker. If it cannot start, or ends before loaded(), it is not restarted.
  void start();
  // The running worker has loaded its interface: its end, and every later one, is restarted.
  void loaded();
  // No restart from now on; a running worker keeps running (the agent shuts down).
  void hold();
  // TERM to the worker's process group, KILL after the grace; a restart waiting is cancelled.
  void stop();
  // No worker runs or is being stopped.
  bool idle() const;
  View view() const;
  void on_change(ChangeCallback callback) { on_change_ = std::move(callback); }

 private:
  class Relay;
  // From the relay, before the Supervisor hears of pid's end: a worker that
  // must not restart is stopped first, so its end leaves it stopped.
  void before_exit(pid_t pid);
  void changed(const ChildInfo& child);
  View view_of(const ChildInfo& child) const;

  const std::string name_;
  std::unique_ptr<Relay> relay_;  // between the Supervisor and the launcher
  Supervisor supervisor_;
  bool loaded_ = false;
  bool held_ = false;
  pid_t ending_ = 0;  // the worker whose end is being reported: it is never signalled
  ChangeCallback on_change_;
};

}  // namespace gpubox::serve
