#include "kernel/kernel_wiring.h"

namespace gpubox::kernel {

KernelWiring wire_kernel(KernelServer& server, KernelInterpreter& interpreter, const std::shared_ptr<PythonExecutor>& executor) {
  KernelWiring wiring;
  wiring.publisher = std::make_shared<IopubPublisher>(server);
  interpreter.set_publisher(wiring.publisher);
  executor->set_idle_sink(std::make_shared<IdleOutputSink>(wiring.publisher));
  wiring.comms = std::make_unique<CommRouter>(server, *executor, *wiring.publisher);
  server.set_shell_interceptor([comms = wiring.comms.get()](const xeus::xmessage& message) { return comms->handle(message); });
  std::weak_ptr<PythonExecutor> weak = executor;
  wiring.counter = std::make_shared<ExecutionCounter>([weak] {
    auto e = weak.lock();
    return e ? e->restarts() : 0;
  });
  server.set_execution_counter(wiring.counter);
  interpreter.set_execution_counter(wiring.counter);
  server.set_interrupt_handler([weak] {
    if (auto e = weak.lock()) e->interrupt();
  });
  server.set_cell_listener([weak](bool serving) {
    if (auto e = weak.lock()) e->expect_cell(serving);
  });
  return wiring;
}

}  // namespace gpubox::kernel
