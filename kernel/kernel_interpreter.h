// The xeus interpreter of gpubox's Jupyter kernel: forwards every request to the
// supervised Python executor and turns what it produces into iopub messages.
// xeus calls it on the shell thread only; interrupt() may come from any thread.
#pragma once

#include <memory>

#include "kernel/execution_counter.h"
#include "kernel/iopub_publisher.h"
#include "kernel/python_executor.h"
#include "xeus/xinterpreter.hpp"

namespace gpubox::kernel {

class KernelInterpreter : public xeus::xinterpreter {
 public:
  explicit KernelInterpreter(std::shared_ptr<PythonExecutor> executor);

  PythonExecutor& executor() { return *executor_; }
  // Where output between cells is parented: each visible execution becomes the
  // last parent when it starts. Set before the kernel starts serving.
  void set_publisher(std::shared_ptr<IopubPublisher> publisher) { publisher_ = std::move(publisher); }
  // The banner and language_info of kernel_info_reply (shared with kernel.info over RPC).
  static nlohmann::json language_info(const nlohmann::json& executor_info);
  // kernel_info_reply's content (also kernel.info's core).
  nlohmann::json kernel_info() const;
  // The kernel's execution counter, which the server assigns to Jupyter cells. Set before serving.
  void set_execution_counter(std::shared_ptr<ExecutionCounter> counter) { counter_ = std::move(counter); }

 private:
  void configure_impl() override;
  nlohmann::json execute_request_impl(int execution_counter, const std::string& code, bool silent,
                                      bool store_history, nlohmann::json user_expressions,
                                      bool allow_stdin) override;
  nlohmann::json complete_request_impl(const std::string& code, int cursor_pos) override;
  nlohmann::json inspect_request_impl(const std::string& code, int cursor_pos, int detail_level) override;
  nlohmann::json is_complete_request_impl(const std::string& code) override;
  nlohmann::json kernel_info_request_impl() override;
  void shutdown_request_impl() override;

  // A helper request (complete, inspect, is_complete): the executor's reply, or fallback.
  nlohmann::json ask(nlohmann::json request, nlohmann::json fallback);

  std::shared_ptr<PythonExecutor> executor_;
  std::shared_ptr<IopubPublisher> publisher_;
  std::shared_ptr<ExecutionCounter> counter_;
};

}  // namespace gpubox::kernel
