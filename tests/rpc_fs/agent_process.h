// AgentProcess: the real gpubox-agent binary, started as a child of the test
// (it becomes a subreaper) with its state dir in a test-owned folder, for
// tests that drive it over RPC. Not thread-safe: one test thread owns it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

namespace gpubox::testing {

class AgentProcess {
 public:
  // Starts `gpubox-agent --state-dir STATE --log-level warn --ready-fd N`
  // (stdout and stderr to STATE/../agent.log) and waits for "ready\n".
  // Null, with the reason in *error, when it fails to start or get ready.
  static std::unique_ptr<AgentProcess> start(const std::string& state_dir, std::string* error);
  AgentProcess(const AgentProcess&) = delete;
  AgentProcess& operator=(const AgentProcess&) = delete;
  // stop() unless already stopped.
  ~AgentProcess();

  pid_t pid() const { return pid_; }
  std::string endpoint() const { return "ipc://" + state_dir_ + "/rpc.sock"; }
  std::string log_path() const { return log_path_; }
  // VmRSS of the agent in KiB (0 when unreadable).
  long rss_kib() const;
  // SIGTERM, then waits (up to timeout) and reaps it; SIGKILL and reap when
  // it outlives the timeout. Returns the wait status, nullopt if killed.
  std::optional<int> stop(std::chrono::milliseconds timeout = std::chrono::seconds(10));

 private:
  AgentProcess(pid_t pid, std::string state_dir, std::string log_path)
      : pid_(pid), state_dir_(std::move(state_dir)), log_path_(std::move(log_path)) {}
  // Waits up to timeout for the agent to exit and reaps it.
  std::optional<int> reap(std::chrono::milliseconds timeout);

  pid_t pid_;
  std::string state_dir_;
  std::string log_path_;
  bool reaped_ = false;
};

// Path of the gpubox-agent binary under test.
std::string agent_binary();

}  // namespace gpubox::testing
