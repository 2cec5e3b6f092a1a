// Agent: the PID-1 core of a sandbox. Reaps every child, forwards signals by
// the policy in signals.h, supervises the configured children, runs the main
// command when given one, and shuts down in order on SIGTERM. run() is called
// once, on the main thread, which then is the event-loop thread. The wiring of
// its parts is agent.cpp; the PID-1 loop (signals, shutdown, exit record) pid1_loop.cpp.
#pragma once

#include <atomic>
#include <memory>
#include <optional>

#include "agent/command_line.h"
#include "agent/event_loop.h"
#include "agent/jobs/job_manager.h"
#include "agent/lifecycle/watchdogs.h"
#include "agent/modeld_supervisor.h"
#include "agent/process_table.h"
#include "agent/serve/serve_manager.h"
#include "agent/supervisor.h"
#include "kernel/agent_kernel.h"
#include "rpc/server.h"

namespace gpubox {

// The agent's exit statuses. With a main command the agent exits with the
// command's status instead (its code, or 128 + the signal that killed it;
// 127 when it is not found, 126 when it cannot be executed).
enum ExitCode {
  kExitClean = 0,       // shut down, every child ended within the grace
  kExitKilled = 1,      // shut down, the grace ran out and something was killed
  kExitUsage = 2,       // bad config or command line; nothing was started
  kExitNoStart = 70,    // the agent itself could not start (state dir, signalfd, …)
  kExitNotExecutable = 126,
  kExitNotFound = 127,
};

class Agent {
 public:
  explicit Agent(CommandLine options);
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;
  ~Agent();

  // Runs until the agent has shut down; returns its exit status.
  int run();

 private:
  // The wiring (agent.cpp). Constructs the supervisor, jobs and watchdogs,
  // kernel, model host and RPC server, in that order, and connects them:
  // kExitClean, or the status to exit with when jobs or RPC cannot start.
  int wire_parts();
  // Builds the seccomp filter of the config and hands it to the process table.
  Status filter_children();
  // As PID 1: the OOM killer chooses a child, never the agent (oom_score_adj).
  void shield_from_oom_killer();
  Status open_state_dir();
  // Where the log (agent.log) and the exit record (exit.json) go: the host's
  // directory of --host-dir-fd, reached through /proc/self/fd (only this
  // process can: it is not dumpable), else the state dir.
  std::string host_files_dir() const;
  // The config's env and secrets: added to every child's environment.
  std::vector<std::pair<std::string, std::string>> child_env() const;
  // Starts the Jupyter kernel when kernel.enabled; a failure is logged and shown in sys.info, not fatal.
  void start_kernel();
  // The kernel's connection file: config kernel.connection_file, else STATE_DIR/kernel.json.
  std::string kernel_connection_file() const;
  // child_env() plus a HOME of the kernel's own when HOME is unset or the work dir.
  std::vector<std::pair<std::string, std::string>> kernel_env() const;
  // Starts gpubox-modeld when the config has a model_host section; a failure shows in sys.info, never fatal.
  void start_modeld();
  // The agent's own ipc:// endpoint for code in the sandbox (GPUBOX_ENDPOINT of the kernel);
  // empty when RPC is off. One is added to rpc.endpoints when a model host needs it and none is configured.
  std::string local_endpoint() const;
  Status start_rpc();
  // The manager of served interface.py workers (serve.*); needs start_kernel's model placement.
  void start_serve();
  nlohmann::json components();
  Status start_main_command();
  void signal_ready();
  void handle_signals();
  void forward(int sig);
  void reap();
  // end: why the sandbox ends, one word for exit.json (host_files_dir()) (terminated,
  // shutdown, idle_timeout, lease_expired, deadline, main_command_ended);
  // reason: the log's words. job_reason: what the jobs' results will say
  // stopped them; persist: copy unacknowledged archives to
  // lifecycle.persistent_dir (when set) before exiting.
  void begin_shutdown(std::string_view end, std::string_view reason,
                      jobs::StopReason job_reason = jobs::StopReason::agent_shutdown, bool persist = true);
  // Leaves STATE_DIR/exit.json {"reason", "detail", "exit_code", "ended_at"}
  // for the host, which cannot wait for a detached agent's status.
  void write_exit_record() const;
  Status start_jobs();
  void on_watchdog(WatchdogShutdown reason);
  void kill_everything();
  void finish_if_done();

  CommandLine options_;
  bool is_pid1_;
  Fd signal_fd_;
  std::unique_ptr<EventLoop> loop_;
  ProcessTable processes_;
  std::unique_ptr<Supervisor> supervisor_;
  std::unique_ptr<Watchdogs> watchdogs_;
  std::unique_ptr<jobs::JobManager> jobs_;  // outlives the server, whose handlers use it
  std::unique_ptr<kernel::AgentKernel> kernel_;  // likewise; set before the server starts, then constant
  std::string kernel_error_;
  std::unique_ptr<ModeldSupervisor> modeld_;  // likewise; null without a model_host section
  std::unique_ptr<serve::ServeManager> serve_;  // likewise; the served interfaces (serve.*)
  nlohmann::json model_paths_ = nlohmann::json::object();  // get_model_path of served code: name → path
  rpc::MethodRegistry methods_;
  std::unique_ptr<rpc::Server> server_;  // destroyed before the loop and the process table
  std::atomic<bool> accepting_work_{true};

  // Event-loop thread only.
  pid_t main_pid_ = 0;
  std::optional<ExitStatus> main_exit_;
  bool stopping_ = false;
  std::string end_reason_ = "agent_exited", end_detail_;
  bool killed_ = false;
  Timers::TimerId grace_timer_ = 0;
  int exit_code_ = kExitClean;
};

}  // namespace gpubox
