// What a xeus kernel of ours needs around its server, interpreter and Python
// executor, the agent's kernel and the standalone one alike: an iopub publisher
// (for the interpreter's cells and for output between cells), comm messages
// served in the executor, interrupts passed to it, and one execution counter.
#pragma once

#include <memory>

#include "kernel/comm_router.h"
#include "kernel/iopub_publisher.h"
#include "kernel/kernel_interpreter.h"
#include "kernel/kernel_server.h"
#include "kernel/python_executor.h"

namespace gpubox::kernel {

struct KernelWiring {
  std::shared_ptr<IopubPublisher> publisher;
  std::unique_ptr<CommRouter> comms;  // the server's shell interceptor uses it: keep it as long as the server
  std::shared_ptr<ExecutionCounter> counter;  // Jupyter cells' and RPC cells' one count
};

// Connects the three (before the server starts). The executor's idle sink
// publishes through server: clear it (set_idle_sink(nullptr)) before the server goes.
KernelWiring wire_kernel(KernelServer& server, KernelInterpreter& interpreter, const std::shared_ptr<PythonExecutor>& executor);

}  // namespace gpubox::kernel
