// Sandbox harness: starts the real gpubox-agent binary, either as PID 1 of a
// fresh PID namespace (CLONE_NEWPID | CLONE_NEWNS, with a private /proc
// mounted inside) or directly as a child of the calling process (the agent is
// then a subreaper). Each sandbox gets its own temporary directory holding the
// state dir, the agent's captured stdout and stderr, and any files the test's
// commands write. Needs root (or CAP_SYS_ADMIN) for the namespace mode.
//
// Not thread-safe: one thread owns a Sandbox. Used by the integration tests and
// by the cold-start benchmark; it depends on neither GoogleTest nor the agent's
// own code, only on the binary.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gpubox::testing {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Path of the gpubox-agent binary under test.
std::string agent_path();

struct SandboxOptions {
  bool new_pid_namespace = true;   // false: run the agent directly (it becomes a subreaper)
  std::vector<std::string> flags;  // extra flags, e.g. {"--grace-seconds", "1"}
  std::vector<std::string> command;  // the main command after "--"; empty: none
  std::optional<nlohmann::json> config;  // written to DIR/config.json and passed as --config
  std::vector<std::string> env;    // "NAME=value" added to the inherited environment, replacing NAME there
  bool pass_state_dir = true;      // add --state-dir DIR/state
  bool pass_ready_fd = true;       // add --ready-fd with the harness's pipe
};

// How a process ended, in the shell's convention: the exit code, or 128 + signal.
int shell_status(int wait_status);

// One running (or ended) agent. The destructor SIGKILLs the agent if it still
// runs (by its pid only), reaps it and removes the temporary directory.
class Sandbox {
 public:
  // Creates the temporary directory, writes the config, clones and execs the
  // agent. Returns null (and a reason in *error) when the clone, the set-up in
  // the child or the exec failed; throws std::runtime_error when the temporary
  // directory or its files cannot be made.
  static std::unique_ptr<Sandbox> start(const SandboxOptions& options, std::string* error = nullptr);

  Sandbox(const Sandbox&) = delete;
  Sandbox& operator=(const Sandbox&) = delete;
  ~Sandbox();

  pid_t host_pid() const { return pid_; }
  // The sandbox's temporary directory, and paths inside it.
  const std::string& dir() const { return dir_; }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  std::string state_dir() const { return dir_ + "/state"; }

  // Waits until the agent writes "ready\n" to its ready fd. False when the
  // deadline passes, or the pipe closes first.
  bool wait_ready(milliseconds timeout);
  // After "ready": waits until the ready pipe reads end-of-file, that is
  // until no process holds its write end any more.
  bool wait_ready_fd_closed(milliseconds timeout);
  // When wait_ready saw "ready", and when the clone was made.
  Clock::time_point started_at() const { return started_at_; }
  Clock::time_point ready_at() const { return ready_at_; }

  // kill(host_pid, sig); false when the agent has already been reaped.
  bool signal(int sig);
  // True while the agent has not exited (checked without reaping it).
  bool running();
  // Waits (pidfd + poll, bounded) for the agent to exit and reaps it; returns
  // its shell status, or nullopt when it is still running at the deadline.
  std::optional<int> wait_exit(milliseconds timeout);
  std::optional<int> exit_status() const { return exit_status_; }
  Clock::time_point exited_at() const { return exited_at_; }

  std::string stdout_text() const;
  std::string stderr_text() const;
  std::string log_text() const;
  // STATE_DIR/agent.log, one JSON object per complete line.
  std::vector<nlohmann::json> log_entries() const;
  // Polls the log until an entry with this "msg" (and, when given, this
  // "child") appears; false at the deadline.
  bool wait_for_log(const std::string& msg, milliseconds timeout, const std::string& child = "") const;

 private:
  Sandbox() = default;

  std::string dir_;
  pid_t pid_ = -1;
  int pidfd_ = -1;
  ssize_t read_ready_pipe(Clock::time_point deadline);

  int ready_fd_ = -1;  // read end of the ready pipe
  std::string ready_buffer_;
  bool reaped_ = false;
  std::optional<int> exit_status_;
  Clock::time_point started_at_{};
  Clock::time_point ready_at_{};
  Clock::time_point exited_at_{};
};

// ---- helpers on the host's view of processes and files ----

struct ProcessInfo {
  pid_t pid = 0;
  pid_t ppid = 0;
  char state = '?';
  std::string comm;
};

// Every process in the host's /proc (the caller's PID namespace).
std::vector<ProcessInfo> list_processes();
std::vector<ProcessInfo> children_of(pid_t parent);
int count_zombie_children(pid_t parent);

// Polls cond every few milliseconds until it holds or the timeout passes.
bool wait_until(const std::function<bool()>& cond, milliseconds timeout);

bool file_exists(const std::string& path);
std::string read_file(const std::string& path);
void write_file(const std::string& path, const std::string& text, int mode = 0644);
int count_lines(const std::string& text);

// Parses the log's "ts" (2026-01-02T03:04:05.123456Z) as microseconds since the epoch.
long long parse_log_timestamp_us(const std::string& ts);

// Creates a fresh directory under /tmp; the caller removes it.
std::string make_temp_dir(const std::string& prefix);

}  // namespace gpubox::testing
