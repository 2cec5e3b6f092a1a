// FakeLauncher: a ProcessLauncher that starts nothing. It records every spawn
// and every signal, can be told to fail the next spawns, and lets the test
// deliver exits (even stale ones) to the callbacks it was given.
// Single-threaded: only the test thread may call it.
#pragma once

#include <signal.h>

#include <deque>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "agent/process_table.h"

namespace gpubox::test {

inline ExitStatus exited_with(int code) {
  ExitStatus status;
  status.code = code;
  return status;
}

inline ExitStatus killed_by(int sig) {
  ExitStatus status;
  status.signal = sig;
  return status;
}

class FakeLauncher final : public ProcessLauncher {
 public:
  struct Spawned {
    pid_t pid = 0;
    SpawnOptions options;
    ExitCallback on_exit;
    bool alive = true;
  };
  struct Signal {
    pid_t pgid = 0;
    int sig = 0;
    bool operator==(const Signal&) const = default;
  };

  FakeLauncher() = default;
  FakeLauncher(const FakeLauncher&) = delete;
  FakeLauncher& operator=(const FakeLauncher&) = delete;

  Result<pid_t> spawn(const SpawnOptions& options, ExitCallback on_exit) override {
    ++attempts_;
    if (!failures_.empty()) {
      Status failure = failures_.front();
      failures_.pop_front();
      return failure;
    }
    pid_t pid = next_pid_++;
    spawned_.push_back(Spawned{pid, options, std::move(on_exit), true});
    return pid;
  }

  bool signal_group(pid_t pgid, int sig) override {
    signals_.push_back(Signal{pgid, sig});
    const Spawned* process = find(pgid);
    return process && process->alive;
  }

  // The next `count` spawns fail with `status`.
  void fail_next_spawns(int count, const Status& status) {
    for (int i = 0; i < count; ++i) failures_.push_back(status);
  }

  // Ends a live process: marks it dead and runs its exit callback.
  void exit(pid_t pid, ExitStatus status) {
    Spawned* process = find(pid);
    if (!process || !process->alive) throw std::logic_error("FakeLauncher: exit of pid " + std::to_string(pid) + ", which is not alive");
    process->alive = false;
    deliver(pid, status);
  }
  void exit(pid_t pid, int code) { exit(pid, exited_with(code)); }
  void kill(pid_t pid, int sig) { exit(pid, killed_by(sig)); }

  // Runs pid's exit callback whether or not it already ran: a stale or
  // duplicate exit, as a buggy reaper would deliver it.
  void deliver(pid_t pid, ExitStatus status) {
    Spawned* process = find(pid);
    if (!process) throw std::logic_error("FakeLauncher: no pid " + std::to_string(pid));
    ExitCallback callback = process->on_exit;  // a copy: the callback may spawn
    callback(pid, status);
  }

  const Spawned* find(pid_t pid) const {
    for (const auto& process : spawned_) {
      if (process.pid == pid) return &process;
    }
    return nullptr;
  }
  Spawned* find(pid_t pid) {
    for (auto& process : spawned_) {
      if (process.pid == pid) return &process;
    }
    return nullptr;
  }

  int attempts() const { return attempts_; }                 // spawn calls, failed ones included
  size_t spawn_count() const { return spawned_.size(); }     // successful spawns
  const std::deque<Spawned>& spawned() const { return spawned_; }
  pid_t last_pid() const { return spawned_.empty() ? 0 : spawned_.back().pid; }
  const std::vector<Signal>& signals() const { return signals_; }
  int live_count() const {
    int live = 0;
    for (const auto& process : spawned_) live += process.alive ? 1 : 0;
    return live;
  }

 private:
  pid_t next_pid_ = 1000;
  int attempts_ = 0;
  std::deque<Spawned> spawned_;
  std::deque<Status> failures_;
  std::vector<Signal> signals_;
};

}  // namespace gpubox::test
