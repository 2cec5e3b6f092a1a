#include "kernel/standalone_kernel.h"

#include <sys/signalfd.h>

#include <csignal>
#include <cstdlib>
#include <cstdio>

#include "base/fd.h"
#include "kernel/kernel_wiring.h"
#include "kernel/iopub_publisher.h"
#include "kernel/kernel_history.h"
#include "kernel/kernel_interpreter.h"
#include "kernel/kernel_server.h"
#include "xeus/xeus_context.hpp"
#include "xeus/xkernel.hpp"

extern char** environ;

namespace gpubox::kernel {

int run_standalone_kernel(const StandaloneKernelOptions& options) {
  xeus::xconfiguration config;
  try {
    config = xeus::load_configuration(options.connection_file);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpubox-agent kernel: cannot read connection file '%s': %s\n",
                 options.connection_file.c_str(), e.what());
    return 2;
  }
  if (config.m_key.empty() && config.m_signature_scheme.empty()) config.m_signature_scheme = "none";

  sigset_t signals;
  sigemptyset(&signals);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&signals, sig);
  Fd signal_fd(::signalfd(-1, &signals, SFD_NONBLOCK | SFD_CLOEXEC));

  ExecutorOptions executor_options;
  executor_options.python = options.python;
  executor_options.mode = options.mode;
  for (char** e = environ; *e != nullptr; ++e) executor_options.env.emplace_back(*e);
  auto executor = std::make_shared<PythonExecutor>(std::move(executor_options), make_direct_launcher());

  try {
    auto interpreter = std::make_unique<KernelInterpreter>(executor);
    KernelInterpreter* interpreter_ptr = interpreter.get();
    const char* user = std::getenv("USER");
    xeus::xkernel kernel(config, user ? user : "gpubox", xeus::make_context<zmq::context_t>(), std::move(interpreter),
                         make_kernel_server, std::make_unique<KernelHistory>(), nullptr, xeus::make_null_debugger,
                         nl::json::object(), nl::json::error_handler_t::replace);
    auto& server = static_cast<KernelServer&>(kernel.get_server());
    server.set_signal_fd(signal_fd.get());
    KernelWiring wiring = wire_kernel(server, *interpreter_ptr, executor);
    Status started = executor->start();  // imports IPython while the first replies go out
    if (!started) std::fprintf(stderr, "gpubox-agent kernel: %s\n", started.message().c_str());
    kernel.start();
    executor->stop();
    executor->set_idle_sink(nullptr);  // it publishes through the server, which goes with kernel
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpubox-agent kernel: %s\n", e.what());
    executor->stop();
    executor->set_idle_sink(nullptr);
    return 1;
  }
  executor->stop();
  return 0;
}

}  // namespace gpubox::kernel
