// AgentProcess: the real gpubox-agent, started for one test as PID 1 of new
// PID and mount namespaces (needs root) or as a plain child; one thread owns it.
//
// Each agent gets a fresh temporary directory DIR: its state dir (DIR/state
// unless the options name another), its config and the other files the test
// hands it, its stdout and stderr, its cwd. The destructor SIGKILLs the agent
// if it still runs (by its pid only), reaps it and removes DIR (kept when
// GPUBOX_KEEP_TEST_DIRS is set). Knows the binary, not the agent's code;
// tests/support/agent_rpc.h adds keys and clients.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tests/support/test_files.h"

namespace gpubox::testing {

// Path of the gpubox-agent binary under test.
std::string agent_path();

struct AgentOptions {
  bool new_pid_namespace = true;     // false: a plain child of the test (no root needed)
  std::vector<std::string> flags;    // extra flags, e.g. {"--grace-seconds", "1"}
  std::vector<std::string> command;  // the main command after "--"; empty: none
  // Written to DIR/config.json and passed as --config. In its strings "{dir}"
  // stands for DIR and "{state_dir}" for the state dir, as in tests/python/agent_harness.py.
  std::optional<nlohmann::json> config;
  std::map<std::string, std::string> files;  // DIR/NAME → content, written before the agent starts
  std::vector<std::string> env;  // "NAME=value" over the test's environment (less GPUBOX_CONFIG)
  std::string state_dir;         // --state-dir; empty: DIR/state
};

// How a process ended, in the shell's convention: the exit code, or 128 + signal.
int shell_status(int wait_status);

class AgentProcess {
 public:
  // Creates DIR, writes the files, starts the agent with --ready-fd; does not
  // wait for it. Null (and a reason in *error) when the clone, the set-up in
  // the child or the exec failed; throws std::runtime_error when DIR or its
  // files cannot be made.
  static std::unique_ptr<AgentProcess> start(const AgentOptions& options, std::string* error = nullptr);
  // start, then wait_ready(timeout): null, with stderr in *error, when it never says ready.
  static std::unique_ptr<AgentProcess> start_ready(const AgentOptions& options, std::string* error = nullptr,
                                                   milliseconds timeout = milliseconds(20'000));

  AgentProcess(const AgentProcess&) = delete;
  AgentProcess& operator=(const AgentProcess&) = delete;
  ~AgentProcess();

  // The agent's pid in the test's PID namespace.
  pid_t pid() const { return pid_; }
  const std::string& dir() const { return dir_; }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  const std::string& state_dir() const { return state_dir_; }
  // The agent's default endpoint, ipc://STATE_DIR/rpc.sock.
  std::string ipc_endpoint() const { return "ipc://" + state_dir_ + "/rpc.sock"; }

  // Waits until the agent writes "ready\n" to its ready fd. False when the
  // deadline passes, or the pipe closes first.
  bool wait_ready(milliseconds timeout);
  // After "ready": waits until no process holds the ready pipe's write end.
  bool wait_ready_fd_closed(milliseconds timeout);
  Clock::time_point started_at() const { return started_at_; }  // the clone
  Clock::time_point ready_at() const { return ready_at_; }      // when wait_ready saw "ready"

  // kill(pid, sig); false when the agent has already been reaped.
  bool signal(int sig);
  // True while the agent has not exited (checked without reaping it).
  bool running();
  // Waits (pidfd + poll, bounded) for the agent to exit and reaps it; its
  // shell status, or nullopt when it still runs at the deadline.
  std::optional<int> wait_exit(milliseconds timeout);
  // SIGTERM and wait_exit(timeout); past it, SIGKILL and reap, and nullopt.
  std::optional<int> stop(milliseconds timeout = milliseconds(10'000));
  std::optional<int> exit_status() const { return exit_status_; }
  Clock::time_point exited_at() const { return exited_at_; }

  // VmRSS from /proc/PID/status; nullopt when unreadable.
  std::optional<long long> rss_bytes() const;

  std::string stdout_text() const;
  std::string stderr_text() const;  // a sanitizer's report lands here
  std::string log_text() const;     // STATE_DIR/agent.log
  // The log, one JSON object per complete line.
  std::vector<nlohmann::json> log_entries() const;
  // Polls the log until an entry with this "msg" (and, when given, this
  // "child") appears; false at the deadline.
  bool wait_for_log(const std::string& msg, milliseconds timeout, const std::string& child = "") const;

 private:
  AgentProcess() = default;
  // Reads what the ready pipe has before the deadline: bytes read (> 0), 0 at EOF, -1 at the deadline.
  ssize_t read_ready_pipe(Clock::time_point deadline);

  std::string dir_;
  std::string state_dir_;
  pid_t pid_ = -1;
  int pidfd_ = -1;
  int ready_fd_ = -1;  // read end of the ready pipe
  std::string ready_buffer_;
  bool reaped_ = false;
  std::optional<int> exit_status_;
  Clock::time_point started_at_{};
  Clock::time_point ready_at_{};
  Clock::time_point exited_at_{};
};

// Parses the log's "ts" (2026-01-02T03:04:05.123456Z) as microseconds since the epoch.
long long parse_log_timestamp_us(const std::string& ts);

}  // namespace gpubox::testing
