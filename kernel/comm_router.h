// Serves the comm messages of the shell channel (comm_open, comm_msg,
// comm_close, comm_info_request) in the Python executor, where the `comm`
// package and ipywidgets live, instead of xeus 2.4.1's own C++ comm manager.
// Called on the shell thread only.
#pragma once

#include <memory>

#include "kernel/iopub_publisher.h"
#include "kernel/python_executor.h"
#include "xeus/xmessage.hpp"
#include "xeus/xserver.hpp"

namespace gpubox::kernel {

class CommRouter {
 public:
  // server, executor and publisher must outlive this router.
  CommRouter(xeus::xserver& server, PythonExecutor& executor, IopubPublisher& publisher);

  // True when message is a comm message, now served as ipykernel serves it:
  // busy, what the executor's handlers publish (under message as parent),
  // comm_info_reply on shell for comm_info_request, idle. False: xeus serves it.
  bool handle(const xeus::xmessage& message);

 private:
  void serve_comm(const xeus::xmessage& message, const std::string& msg_type);
  void serve_comm_info(const xeus::xmessage& message);

  xeus::xserver& server_;
  PythonExecutor& executor_;
  IopubPublisher& publisher_;
  std::string session_;
};

}  // namespace gpubox::kernel
