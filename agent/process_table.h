// ProcessTable: spawns children and routes every reaped exit status to the
// callback registered for its pid, so a waiter never loses a status to the
// global reap. spawn() may be called from any thread; reap() belongs to the
// event-loop thread, which also runs every callback.
#pragma once

#include <sys/types.h>

#include <functional>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "agent/spawn_thread.h"
#include "base/status.h"
#include "base/thread_annotations.h"

namespace gpubox {

// How a process ended: an exit code, or the signal that killed it.
struct ExitStatus {
  int code = 0;    // valid when signal == 0
  int signal = 0;  // non-zero when killed by a signal
  bool core_dumped = false;
  // CPU seconds (user + system) of the process and of every descendant it
  // waited for, from wait4's rusage; -1 when not known.
  double cpu_s = -1;

  static ExitStatus from_wait_status(int wait_status);
  bool success() const { return signal == 0 && code == 0; }
  // The shell's convention: the code, or 128 + signal.
  int shell_code() const { return signal ? 128 + signal : code; }
  // "exited with code 3" / "killed by SIGKILL".
  std::string describe() const;
};

struct SpawnOptions {
  std::vector<std::string> argv;  // argv[0] is looked up in PATH when it has no '/'
  std::vector<std::string> env;   // the whole environment, "NAME=value"
  std::string cwd;                // empty: inherit
  bool new_session = false;       // setsid(); otherwise a new process group (setpgid)
  int stdin_fd = -1;              // -1: inherit the agent's
  int stdout_fd = -1;
  int stderr_fd = -1;
  // A terminal (a pty's slave path) the child opens as its fds 0, 1 and 2 and
  // its controlling terminal; requires new_session; the *_fd fields are then unused.
  std::string controlling_tty;
  std::vector<std::pair<int, int>> extra_fds;  // {from, to}: dup2'ed into the child (the kernel's channel)
};

// Starts processes; an interface so the supervisor can be tested with a fake.
class ProcessLauncher {
 public:
  using ExitCallback = std::function<void(pid_t pid, ExitStatus status)>;
  virtual ~ProcessLauncher() = default;
  // Starts a child in its own process group (or session). The child's signal
  // mask is emptied and every disposition reset before exec. A program that
  // cannot be executed is an error (not_found or permission_denied), not a child.
  virtual Result<pid_t> spawn(const SpawnOptions& options, ExitCallback on_exit) = 0;
  // Sends sig to the process group led by pgid; false when none exists.
  virtual bool signal_group(pid_t pgid, int sig) = 0;
};

class ProcessTable final : public ProcessLauncher {
 public:
  ProcessTable() = default;
  ProcessTable(const ProcessTable&) = delete;
  ProcessTable& operator=(const ProcessTable&) = delete;

  Result<pid_t> spawn(const SpawnOptions& options, ExitCallback on_exit) override;
  bool signal_group(pid_t pgid, int sig) override;

  // Reaps every exited child (waitpid(-1, WNOHANG)), orphans included, and
  // runs the callback of each that has one. Returns how many were reaped.
  int reap();
  // False once a reap found that no child at all is left (ECHILD).
  bool has_children() const;
  // Pids spawned through this table and not yet reaped.
  std::vector<pid_t> live_pids() const;
  // Each child spawned from now on gets this oom_score_adj (-1000..1000): how
  // PID 1 makes its children, never itself, the OOM killer's choice.
  void set_children_oom_score_adj(int value) { children_oom_score_adj_ = value; }
  // Each child spawned from now on runs under this seccomp filter: the spawn
  // thread holds it (agent/spawn_thread.h). Set before the
  // first spawn. An error when the kernel refuses the filter.
  Status set_child_filter(const SeccompProgram& filter);

 private:
  static constexpr int kInheritOomScore = INT32_MIN;
  std::atomic<int> children_oom_score_adj_{kInheritOomScore};
  // Created at the first spawn, under mutex_, unless set_child_filter made it first.
  std::unique_ptr<SpawnThread> spawn_thread_;
  SpawnThread& spawn_thread();
  mutable Mutex mutex_;
  // waitpid runs under mutex_ too, so a child cannot be reaped between its
  // spawn and the registration of its callback.
  std::unordered_map<pid_t, ExitCallback> waiters_ GUARDED_BY(mutex_);
  bool no_children_ GUARDED_BY(mutex_) = false;
};

// Process-wide environment as "NAME=value" strings, with overrides applied
// and the names in `remove` left out.
std::vector<std::string> build_environment(const std::vector<std::pair<std::string, std::string>>& overrides,
                                           const std::vector<std::string>& remove = {});

}  // namespace gpubox
