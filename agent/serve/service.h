// Service: one served interface.py (serve.start): a supervised Python worker
// (agent/serve/worker/, embedded in the agent) that imports it and runs its
// @expose functions, each call in a thread of its own. A crashed worker is
// restarted with backoff up to restart_limit times, then marked failed
// (WorkerRestarts); the calls it had in flight end with `unavailable`.
// Thread-safe: RPC handler threads call it. Each service runs an event loop
// of its own on its supervision thread, where its WorkerRestarts, its timers
// and every worker start live; one reader thread per worker process reads
// its channel, one log thread per worker process reads its output.
// With an FdWatch (the RPC I/O thread), a small plain call goes out from that
// thread (take_call) and the worker's small messages are read there, so its
// answer leaves without waking another thread.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "agent/event_loop.h"
#include "agent/process_table.h"
#include "agent/serve/log_ring.h"
#include "agent/serve/worker_restarts.h"
#include "agent/serve/worker_wire.h"
#include "base/thread_annotations.h"
#include "rpc/call.h"
#include "rpc/fd_watch.h"
#include "base/status.h"

namespace gpubox::serve {

struct ServiceOptions {
  std::string name;
  std::string path;                 // absolute: the interface.py the worker imports
  int restart_limit = 5;            // restarts after crashes before the service is marked failed
  std::string python = "python3";   // kernel.python
  std::vector<std::string> env;     // the worker's whole environment
  std::string cwd;                  // empty: the agent's
  std::vector<std::string> sys_path;  // put on sys.path after the interface's own directory
  nlohmann::json models = nlohmann::json::object();  // get_model_path: name → path
  std::size_t log_bytes = 1 << 20;  // kept of each of stdout and stderr
  std::chrono::milliseconds stop_grace{2000};
  rpc::FdWatch* fd_watch = nullptr;  // the RPC I/O thread; must outlive the service's stop()
};

struct WorkerProcess;
struct PendingCall;

class Service {
 public:
  Service(ServiceOptions options, ProcessLauncher& launcher);
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;
  // Stops the worker (TERM, KILL after the grace) and joins every thread.
  ~Service();

  // Starts the supervision thread and the first worker, which imports the interface.
  void start();
  // Waits until the first import ended: ok when ready; invalid_request with
  // the import's exception when it failed; the call's stop reason if it stops.
  Status wait_first_load(const rpc::CallContext& call);
  // serve.call's whole handling: waits for a (re)starting worker, forwards the
  // call and relays its stream, result or error.
  Result<nlohmann::json> call(rpc::CallContext& call);
  // serve.call's fast path, on the RPC I/O thread (never blocks): takes a
  // ready worker's plain (not generator) function called with small
  // arguments and sends it the call; the answer ends the call where it is
  // read. False (nothing sent): call() must handle it.
  bool take_call(const std::shared_ptr<rpc::CallContext>& call);
  // No more restarts from now on (the agent shuts down); the worker keeps running until stop().
  void begin_stop();
  // Ends the worker (TERM, KILL after the grace) and waits for it and every thread.
  void stop();

  const std::string& name() const { return options_.name; }
  // serve.list's entry: {name, path, state, pid, restarts, error?, functions}.
  nlohmann::json describe() const;
  // {stdout, stderr} (the last tail_bytes of each; 0: all kept).
  nlohmann::json logs(std::size_t tail_bytes) const;

 private:
  class WorkerLauncher;
  // On the supervision thread, for WorkerRestarts (through WorkerLauncher):
  // starts a worker and its reader thread; on_exit runs there once the reader is done with it.
  Result<pid_t> launch_worker(ProcessLauncher::ExitCallback on_exit);
  bool signal_worker(pid_t pgid, int sig);
  void on_supervision(const WorkerRestarts::View& view);
  // Ends the loop once stop() asked for it and no worker is left.
  void end_loop_if_done();
  // On the worker's reader thread: runs it to its end.
  void run_worker(std::shared_ptr<WorkerProcess> process, bool first);
  Result<std::shared_ptr<WorkerProcess>> spawn();
  void read_logs(std::shared_ptr<WorkerProcess> process);
  // Reads the worker's messages until it ends; false when its channel ended
  // or broke, true when the process exited and the rest must still be read.
  bool read_with_fd_watch(const std::shared_ptr<WorkerProcess>& process);
  bool read_on_io_thread(WorkerProcess& process);
  // One message read from the worker; false when the worker must end.
  bool handle_read(WorkerProcess& process, Result<std::optional<WireMessage>> message);
  void handle(WorkerProcess& process, WireMessage message);
  void deliver(WorkerProcess& process, nlohmann::json body, std::vector<zmq::message_t> attachments);
  // The function's entry in functions_, or null.
  const nlohmann::json* function_entry(const std::string& name) const REQUIRES(mutex_);
  Result<nlohmann::json> relay(rpc::CallContext& call, WorkerProcess& process, PendingCall& pending, std::uint64_t id);

  const ServiceOptions options_;
  ProcessLauncher& launcher_;
  LogRing stdout_;
  LogRing stderr_;
  std::atomic<std::uint64_t> next_id_{1};

  // Made by start(), before the supervision thread, which alone uses them
  // from then on (its tasks come through loop_->post()); declared in the
  // order they are made, so each is destroyed before what it uses.
  std::unique_ptr<EventLoop> loop_;
  std::unique_ptr<WorkerLauncher> worker_launcher_;
  std::unique_ptr<WorkerRestarts> restarts_policy_;
  std::thread supervisor_;
  // State below belongs to the supervision thread.
  std::shared_ptr<WorkerProcess> launched_;  // the last worker started; null once its end was reported
  bool launched_any_ = false;
  bool stop_requested_ = false;

  mutable Mutex mutex_;
  std::condition_variable_any changed_;
  std::string state_ GUARDED_BY(mutex_) = "starting";  // starting | ready | restarting | failed | stopped
  std::string error_ GUARDED_BY(mutex_);
  int restarts_ GUARDED_BY(mutex_) = 0;
  bool first_load_done_ GUARDED_BY(mutex_) = false;
  Status first_load_ GUARDED_BY(mutex_);
  bool stopping_ GUARDED_BY(mutex_) = false;        // stop() was called
  bool no_restart_ GUARDED_BY(mutex_) = false;      // begin_stop() or stop()
  nlohmann::json functions_ GUARDED_BY(mutex_) = nlohmann::json::array();
  std::shared_ptr<WorkerProcess> process_ GUARDED_BY(mutex_);  // the current worker; null between processes
};

}  // namespace gpubox::serve
