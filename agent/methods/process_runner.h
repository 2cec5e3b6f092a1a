// ProcessRunner: one process started for an RPC caller, with pipes on its
// stdin, stdout and stderr (or one pseudo-terminal for all three), pumped on
// the calling thread (a worker). Its exit
// status arrives from the agent's reaper through an eventfd. Not thread-safe:
// one worker drives one runner.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "base/fd.h"
#include "agent/process_table.h"

namespace gpubox {

class ProcessRunner {
 public:
  enum class Stream { stdout_stream = 1, stderr_stream = 2 };
  using OutputCallback = std::function<Status(Stream stream, std::string_view bytes)>;

  struct Outcome {
    std::optional<ExitStatus> status;  // nullopt only when the wait was abandoned
    bool timed_out = false;
    double wall_s = 0;
  };

  // A pseudo-terminal's window size, in characters.
  struct TerminalSize {
    unsigned short rows = 24;
    unsigned short cols = 80;
  };

  // Spawns the process (in its own process group) with fresh pipes; with a
  // terminal size, in its own session on a fresh pty instead (its output then
  // all comes as stdout, as a terminal merges it).
  static Result<std::unique_ptr<ProcessRunner>> start(ProcessLauncher& launcher, SpawnOptions options,
                                                      std::optional<TerminalSize> tty = std::nullopt);
  ~ProcessRunner();
  ProcessRunner(const ProcessRunner&) = delete;
  ProcessRunner& operator=(const ProcessRunner&) = delete;

  pid_t pid() const { return pid_; }
  // Queues bytes for the process's stdin; close_stdin() after them sends EOF.
  void write_stdin(std::string bytes);
  void close_stdin();
  // Signals the process group while the process has not been reaped.
  bool signal(int sig);
  // Sets the pty's window size (the kernel sends SIGWINCH to its foreground
  // group); invalid_request without a pty.
  Status resize(TerminalSize size);

  // Pumps output to on_output until the process has ended and its output is
  // drained. stop_fd readable → KILL the group, then finish. extra_fd
  // readable → on_extra() (e.g. to take stdin writes). A callback's error
  // kills the group and is returned.
  Result<Outcome> run(const OutputCallback& on_output, std::optional<std::chrono::steady_clock::time_point> deadline,
                      int stop_fd, int extra_fd = -1, const std::function<Status()>& on_extra = nullptr);

 private:
  struct ExitBox;
  ProcessRunner(ProcessLauncher& launcher, pid_t pid, Fd stdin_w, Fd stdout_r, Fd stderr_r, std::shared_ptr<ExitBox> box,
                std::chrono::steady_clock::time_point started, bool tty);
  // The reaper's callback: leaves the status in box and raises its eventfd.
  static ProcessLauncher::ExitCallback exit_into(std::shared_ptr<ExitBox> box);
  static Result<std::unique_ptr<ProcessRunner>> start_on_pty(ProcessLauncher& launcher, SpawnOptions options,
                                                             TerminalSize size, std::shared_ptr<ExitBox> box);
  void pump_stdin();

  ProcessLauncher& launcher_;
  pid_t pid_;
  Fd stdin_;
  Fd stdout_;
  Fd stderr_;
  std::shared_ptr<ExitBox> exit_;
  std::string stdin_pending_;
  bool stdin_closing_ = false;
  std::chrono::steady_clock::time_point started_;
  bool tty_ = false;  // stdout_ is the pty's master, stdin_ a duplicate of it
};

}  // namespace gpubox
