// The Jupyter kernel inside the agent: xeus on its own thread with its five
// sockets on 127.0.0.1 (random ports, a fresh HMAC key, a 0600 connection
// file), and the supervised Python executor that Jupyter clients and the
// kernel.* RPC methods share (one request at a time). Thread-safe.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "kernel/python_executor.h"
#include "base/status.h"

namespace xeus {
class xkernel;
}

namespace gpubox::kernel {

class CommRouter;
class ExecutionCounter;
class KernelServer;
class KernelInterpreter;
class IopubPublisher;
class ModelReport;

struct AgentKernelOptions {
  ExecutorOptions executor;
  std::string connection_file;  // written with mode 0600
  bool preload = false;         // start the executor now and run its setup, rather than at first use
  nlohmann::json models = nlohmann::json::array();  // the models' report before loading (pending_model_report)
  std::function<void(const nlohmann::json&)> on_model_report;  // each report the loader sends (setup thread)
};

class AgentKernel {
 public:
  static Result<std::unique_ptr<AgentKernel>> start(AgentKernelOptions options, std::unique_ptr<ExecutorLauncher> launcher);
  ~AgentKernel();
  AgentKernel(const AgentKernel&) = delete;
  AgentKernel& operator=(const AgentKernel&) = delete;

  // Stops serving Jupyter clients and kills the executor (waits for both).
  void stop();
  // Begins stopping without waiting (the agent's shutdown, on its loop thread):
  // the executor is not restarted when the agent's TERM ends it.
  void begin_stop();
  PythonExecutor& executor() { return *executor_; }
  // Runs an RPC caller's execute request (PythonExecutor::request). A visible one
  // (store_history true, not silent) is also broadcast on iopub, as Jupyter
  // frontends expect of another client's cell: status busy, execute_input,
  // its outputs, status idle, all under an execute_request header of its own.
  Result<nlohmann::json> execute(const nlohmann::json& request, ExecutorSink& sink,
                                 std::optional<std::chrono::milliseconds> timeout = std::nullopt);
  // Interrupts the running cell (Jupyter's or an RPC caller's), input() waits included.
  void interrupt();
  // The connection file's content without the key: transport, ip and the five ports.
  nlohmann::json endpoints() const;
  // For sys.info: {"state": "ready", "executor": "not started"|"setting up"|"idle"|"busy", "restarts": n}.
  nlohmann::json status() const;
  // kernel.info: implementation, language_info, executor details and state, endpoints, models and model_info.
  nlohmann::json info() const;
  // The count of a new visible RPC execution, from the kernel's one counter.
  int next_execution_count();

  // Marks a frontend attached (an open kernel.relay) for as long as it is held.
  class Attachment {
   public:
    explicit Attachment(AgentKernel& kernel) : kernel_(kernel) { ++kernel_.attached_; }
    ~Attachment() { --kernel_.attached_; }
    Attachment(const Attachment&) = delete;
    Attachment& operator=(const Attachment&) = delete;

   private:
    AgentKernel& kernel_;
  };
  // For the idle watchdog: a cell or setup (models loading) runs, or a frontend is
  // attached (as Jupyter Server does not cull a kernel with connections by default).
  bool in_use() const { return executor_->busy() || executor_->setting_up() || attached_.load() > 0; }

 private:
  AgentKernel() = default;
  std::shared_ptr<PythonExecutor> executor_;
  std::unique_ptr<xeus::xkernel> kernel_;
  KernelServer* server_ = nullptr;            // owned by kernel_
  KernelInterpreter* interpreter_ = nullptr;  // owned by kernel_
  std::shared_ptr<IopubPublisher> publisher_;  // publishes through server_
  std::unique_ptr<CommRouter> comms_;         // serves comm messages in the executor, on the shell thread
  std::shared_ptr<ExecutionCounter> counter_;  // shared with server_ and interpreter_
  nlohmann::json endpoints_;
  std::shared_ptr<ModelReport> models_;
  std::thread thread_;        // serves shell (xkernel::start)
  std::thread setup_thread_;  // with preload: starts the executor and runs its setup (models load)
  std::atomic<int> attached_{0};  // open Attachments
};

}  // namespace gpubox::kernel
