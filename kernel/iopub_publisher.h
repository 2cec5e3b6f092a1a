// Publishes on the kernel's iopub socket from any thread, outside xeus's own
// request flow: output a background thread writes between cells (parented to
// the last execution, as ipykernel does) and the executions RPC callers run
// (each under an execute_request header of its own, so an attached Jupyter
// frontend sees them). Thread-safe.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "base/thread_annotations.h"
#include "kernel/python_executor.h"
#include "xeus/xmessage.hpp"

namespace xeus {
class xserver;
}

namespace gpubox::kernel {

class IopubPublisher {
 public:
  // server must outlive this publisher; its publish() must be thread-safe (KernelServer's is).
  explicit IopubPublisher(xeus::xserver& server);

  void publish(const std::string& msg_type, nlohmann::json content, const nlohmann::json& parent,
               nlohmann::json metadata = nlohmann::json::object(), xeus::buffer_sequence buffers = {});
  // Publishes one executor frame (stream text aside): display, execute_result, clear_output, error,
  // and comm (comm_open, comm_msg or comm_close, its base64 buffers as binary frames).
  void publish_frame(const nlohmann::json& frame, int execution_count, const nlohmann::json& parent);
  // The parent of output produced while no request runs: the last execution's request header.
  void set_last_parent(nlohmann::json parent) EXCLUDES(mutex_);
  nlohmann::json last_parent() const EXCLUDES(mutex_);
  // A fresh execute_request header for an execution that came over RPC.
  nlohmann::json rpc_request_header() const;

 private:
  xeus::xserver& server_;
  std::string session_;
  mutable Mutex mutex_;
  nlohmann::json last_parent_ GUARDED_BY(mutex_) = nlohmann::json::object();
};

// The executor's idle sink: output between requests, published under the last parent.
class IdleOutputSink : public ExecutorSink {
 public:
  explicit IdleOutputSink(std::shared_ptr<IopubPublisher> publisher) : publisher_(std::move(publisher)) {}
  void stream(const std::string& name, std::string text) override;
  void message(const nlohmann::json& frame) override;
  std::optional<std::string> input(const std::string&, bool) override { return std::nullopt; }

 private:
  std::shared_ptr<IopubPublisher> publisher_;
};

// Passes an RPC execution's output to its caller's sink and broadcasts it on
// iopub under parent (the execution's own execute_request header).
class BroadcastSink : public ExecutorSink {
 public:
  BroadcastSink(IopubPublisher& publisher, nlohmann::json parent, int execution_count, ExecutorSink& caller)
      : publisher_(publisher), parent_(std::move(parent)), count_(execution_count), caller_(caller) {}
  void stream(const std::string& name, std::string text) override;
  void message(const nlohmann::json& frame) override;
  std::optional<std::string> input(const std::string& prompt, bool password) override {
    return caller_.input(prompt, password);
  }
  void started() override;

 private:
  IopubPublisher& publisher_;
  nlohmann::json parent_;
  int count_;
  ExecutorSink& caller_;
};

}  // namespace gpubox::kernel
