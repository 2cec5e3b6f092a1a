// The supervised Python executor: the image's python3 running the package kernel/executor/,
// talking to the agent over a private socketpair (fd 3) with its fds 1 and 2 on
// pipes the agent reads. A crash of user code kills only this child: the next
// request finds a fresh executor with its setup code replayed.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/embedded_python.h"
#include "base/fd.h"
#include "kernel/frame_channel.h"
#include "base/status.h"
#include "base/thread_annotations.h"

namespace gpubox::kernel {

class ExecutorSink;

struct ExecutorOptions {
  std::string python = "python3";      // found on PATH when it has no slash
  std::vector<std::string> env;        // the child's whole environment (NAME=value)
  std::vector<std::string> setup_code; // run hidden after every start and restart
  std::string mode;                    // "" (IPython when importable) or "plain"
  std::chrono::milliseconds startup_timeout{60000};
  // Gets the display frames setup code sends while it is replayed (the model
  // loader's report); null: they are dropped. Called on the requesting thread.
  std::shared_ptr<ExecutorSink> setup_sink;
};

// What starting the executor needs from its parent process.
struct ExecutorProcessSpec {
  std::vector<std::string> argv;
  std::vector<std::string> env;
  int channel_fd = -1;  // becomes fd 3
  int stdout_fd = -1;   // becomes fd 1
  int stderr_fd = -1;   // becomes fd 2
};

// Starts and waits for the executor process: directly (standalone kernel) or
// through the agent's process table (PID 1 reaps every child itself).
class ExecutorLauncher {
 public:
  virtual ~ExecutorLauncher() = default;
  virtual Result<pid_t> spawn(const ExecutorProcessSpec& spec) = 0;
  // Blocks until pid has exited; its wait status.
  virtual int wait(pid_t pid) = 0;
};

// posix_spawn with an empty signal mask and default dispositions; waitpid.
std::unique_ptr<ExecutorLauncher> make_direct_launcher();

// Receives what one request produces, on the requesting thread, in order.
class ExecutorSink {
 public:
  virtual ~ExecutorSink() = default;
  virtual void stream(const std::string& name, std::string text) = 0;
  // display (with "update"), execute_result, clear_output and error frames.
  virtual void message(const nlohmann::json& frame) = 0;
  // input() in user code; nullopt when the wait was interrupted.
  virtual std::optional<std::string> input(const std::string& prompt, bool password) = 0;
  // Once per request, just before it is sent: output produced before it (between
  // requests) has gone to the idle sink, whatever comes next is this request's.
  virtual void started() {}
};

// A sink that keeps nothing (setup replay, hidden executions).
class NullSink : public ExecutorSink {
 public:
  void stream(const std::string&, std::string) override {}
  void message(const nlohmann::json&) override {}
  std::optional<std::string> input(const std::string&, bool) override { return std::nullopt; }
};

// Owns the executor process. request() is called by one thread at a time
// (it serializes callers); interrupt() may be called from any thread. With an
// idle sink, a watcher thread publishes what the process writes between requests.
class PythonExecutor {
 public:
  PythonExecutor(ExecutorOptions options, std::unique_ptr<ExecutorLauncher> launcher);
  ~PythonExecutor();
  PythonExecutor(const PythonExecutor&) = delete;
  PythonExecutor& operator=(const PythonExecutor&) = delete;

  // Spawns the executor; it imports in the background until the first request.
  Status start() EXCLUDES(mutex_);
  // Sends one request ({"type": "execute" | "complete" | "inspect" | "is_complete", ...})
  // and streams what it produces into sink until its final frame, which it returns.
  // When the executor dies (or the timeout passes: interrupt, 2 s grace, then kill)
  // it is restarted with setup replayed and the result is an error frame with
  // "died": true and a message that says why.
  Result<nlohmann::json> request(const nlohmann::json& req, ExecutorSink& sink,
                                 std::optional<std::chrono::milliseconds> timeout = std::nullopt) EXCLUDES(mutex_);
  // SIGINT to a running cell's executor. A cell sent but not started yet (or one
  // the Jupyter server is about to send, see expect_cell) gets it as its code
  // starts; between requests it is dropped, and it never reaches a later request.
  void interrupt() EXCLUDES(interrupt_mutex_);
  // The Jupyter server serves an execute_request that is about to come (true), or
  // has finished serving it (false): an interrupt meanwhile is for that cell.
  void expect_cell(bool expected) EXCLUDES(interrupt_mutex_);
  // Kills and starts the executor again, replaying setup code.
  Status restart() EXCLUDES(mutex_);
  // Kills the executor (at once, even while a cell runs) and waits for it;
  // later requests fail. Any thread.
  void stop() EXCLUDES(mutex_);
  // For the agent's shutdown, from any thread without waiting: no restart from
  // now on; the running request (if any) ends with an error once its process dies.
  void shut_down();
  // Adds code replayed after every restart (and runs nothing now).
  void add_setup_code(std::string code) EXCLUDES(mutex_);
  // Receives what the executor writes while no request runs (a background
  // thread's prints, a subprocess's output, display() from a thread), in order:
  // from a watcher thread, or from the thread of the next request before that
  // request is sent. Without one, such output goes to the next request.
  void set_idle_sink(std::shared_ptr<ExecutorSink> sink) EXCLUDES(mutex_);

  // The executor's ready frame ({} until it has started): implementation, python_version, pid.
  nlohmann::json info() const EXCLUDES(info_mutex_);
  int restarts() const { return restarts_.load(); }
  bool busy() const { return running_pid_.load() != 0; }
  // The executor is starting or replaying its setup code (after a start or a
  // restart, a crash's included); requests wait for it to finish.
  bool setting_up() const { return setting_up_.load(); }

 private:
  struct Process;
  Status spawn_locked() REQUIRES(mutex_);
  void kill_locked() REQUIRES(mutex_);
  Result<nlohmann::json> await_locked(ExecutorSink& sink, bool startup,
                                      std::optional<std::chrono::steady_clock::time_point> deadline) REQUIRES(mutex_);
  Status ensure_ready_locked() REQUIRES(mutex_);
  Status restart_locked() REQUIRES(mutex_);
  void replay_setup_locked() REQUIRES(mutex_);
  // Idle output: the watcher polls the process's fds only while watching_.
  void set_watching_locked(bool on) REQUIRES(mutex_);
  void pump_idle_locked() REQUIRES(mutex_);
  // Reads what the process's stdout (i 0) or stderr (i 1) pipe holds when called (not
  // what is written meanwhile: each call ends) and passes it on in pieces of about
  // kStreamChunk at most that end on a whole UTF-8 character (at EOF, whatever is
  // left): to sink, or without one (startup) into startup_output. True at EOF.
  bool read_pipe_locked(Process& p, int i, ExecutorSink* sink) REQUIRES(mutex_);
  void watch_loop() EXCLUDES(mutex_);
  void trim_memory_locked() REQUIRES(mutex_);

  // Held by the one running request for all of its run (the process is its
  // alone meanwhile), by the watcher while it publishes idle output, and by
  // every other call that touches the process.
  Mutex mutex_;
  ExecutorOptions options_ GUARDED_BY(mutex_);  // its setup_code grows
  std::unique_ptr<ExecutorLauncher> launcher_;
  std::unique_ptr<Process> process_ GUARDED_BY(mutex_);
  Mutex interrupt_mutex_;  // orders interrupt()'s SIGINT before the end of the request it targets
  // Atomic, not guarded: written under interrupt_mutex_, read by busy() from any
  // thread without it.
  std::atomic<pid_t> running_pid_{0};
  bool request_started_ GUARDED_BY(interrupt_mutex_) = false;  // the running cell's code has begun
  bool interrupt_next_ GUARDED_BY(interrupt_mutex_) = false;   // an interrupt waits for the cell to start
  bool cell_expected_ GUARDED_BY(interrupt_mutex_) = false;    // see expect_cell
  // The executor process, while one exists. Atomic, not guarded: written under
  // mutex_, read by stop() without it, to kill a cell whose request holds mutex_.
  std::atomic<pid_t> live_pid_{0};
  // Atomics, not guarded, each read without a lock: restarts_ (written under
  // mutex_) by restarts(); interrupt_requested_ (set under interrupt_mutex_,
  // cleared and read under mutex_) by the request; shut_down_ by any thread;
  // setting_up_ by setting_up().
  std::atomic<int> restarts_{0};
  std::atomic<bool> interrupt_requested_{false};
  std::atomic<bool> shut_down_{false};
  std::atomic<bool> setting_up_{false};  // ensure_ready_locked is starting the process or replaying setup
  bool replaying_ GUARDED_BY(mutex_) = false;  // setup code is running
  size_t streamed_bytes_ GUARDED_BY(mutex_) = 0;  // output since the last malloc_trim
  std::shared_ptr<ExecutorSink> idle_sink_ GUARDED_BY(mutex_);
  // Made by the constructor, never replaced (no lock for the fds themselves);
  // what the epoll sets hold changes under mutex_.
  Fd process_fds_;    // epoll set of the live process's stdout, stderr and channel
  Fd watch_set_;      // epoll set the watcher waits on: wake_, and process_fds_ while watching_
  Fd wake_;           // eventfd: the watcher is to stop
  bool watching_ GUARDED_BY(mutex_) = false;
  std::atomic<bool> watcher_stop_{false};  // atomic: the watcher reads it before it takes mutex_
  std::thread watcher_ GUARDED_BY(mutex_);  // started by set_idle_sink; joined by the destructor
  mutable Mutex info_mutex_;
  nlohmann::json info_ GUARDED_BY(info_mutex_) = nlohmann::json::object();
};

// The embedded modules of kernel/executor/ (generated): (module name, source),
// "__init__" and "__main__" included.
const EmbeddedSources& executor_package_sources();

// Python text that makes that package importable as gpubox_executor (its files
// named <gpubox-executor>/MODULE.py, which user tracebacks leave out) and runs
// its main(): what the executor's bootstrap reads as its first frame.
std::string executor_program();

}  // namespace gpubox::kernel
