#include "kernel/agent_kernel.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "kernel/kernel_history.h"
#include "kernel/iopub_publisher.h"
#include "kernel/kernel_interpreter.h"
#include "kernel/kernel_server.h"
#include "kernel/kernel_wiring.h"
#include "kernel/model_report.h"
#include "xeus/xeus_context.hpp"
#include "xeus/xkernel.hpp"

namespace gpubox::kernel {
namespace {

using nlohmann::json;

// 32 random bytes as hex: the HMAC key Jupyter clients sign with.
Result<std::string> random_key() {
  unsigned char bytes[32];
  int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::from_errno(errno, "kernel: open /dev/urandom");
  ssize_t n = ::read(fd, bytes, sizeof bytes);
  ::close(fd);
  if (n != static_cast<ssize_t>(sizeof bytes)) return Status(ErrorCode::internal, "kernel: short read from /dev/urandom");
  static const char hex[] = "0123456789abcdef";
  std::string key;
  for (unsigned char b : bytes) key += {hex[b >> 4], hex[b & 15]};
  return key;
}

Status write_private_file(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Status::from_errno(errno, "kernel: cannot write '" + tmp + "'");
  ssize_t n = ::write(fd, text.data(), text.size());
  ::close(fd);
  if (n != static_cast<ssize_t>(text.size())) return Status(ErrorCode::internal, "kernel: short write to '" + tmp + "'");
  if (::rename(tmp.c_str(), path.c_str()) != 0) return Status::from_errno(errno, "kernel: cannot rename to '" + path + "'");
  return Status::ok();
}

// sys.info's "executor" and kernel.info's "executor_state": "setting up" while the
// executor starts or replays its setup (models, workspace, kernel.setup_code) after
// a start or a restart, which a running request's crash may cause, so it comes first.
std::string executor_state(const PythonExecutor& executor) {
  if (executor.setting_up()) return "setting up";
  if (executor.busy()) return "busy";
  return executor.info().empty() ? "not started" : "idle";
}

}  // namespace

Result<std::unique_ptr<AgentKernel>> AgentKernel::start(AgentKernelOptions options, std::unique_ptr<ExecutorLauncher> launcher) {
  auto key = random_key();
  if (!key) return key.status();
  xeus::xconfiguration config;
  config.m_transport = "tcp";
  config.m_ip = "127.0.0.1";  // never reachable from outside the sandbox: remote access goes through RPC
  config.m_shell_port = config.m_control_port = config.m_stdin_port = config.m_iopub_port = config.m_hb_port = "0";
  config.m_signature_scheme = "hmac-sha256";
  config.m_key = *key;

  // xeus writes a banner and its own diagnostics to the iostreams; PID 1's stdout and stderr
  // belong to the sandbox's output and its JSON log, and nothing else in the agent uses iostreams.
  std::cout.rdbuf(nullptr);
  std::cerr.rdbuf(nullptr);
  std::clog.rdbuf(nullptr);

  std::unique_ptr<AgentKernel> self(new AgentKernel());
  self->models_ = std::make_shared<ModelReport>(std::move(options.models), std::move(options.on_model_report));
  options.executor.setup_sink = self->models_;
  self->executor_ = std::make_shared<PythonExecutor>(std::move(options.executor), std::move(launcher));
  try {
    auto interpreter = std::make_unique<KernelInterpreter>(self->executor_);
    self->interpreter_ = interpreter.get();
    self->kernel_ = std::make_unique<xeus::xkernel>(config, "gpubox", xeus::make_context<zmq::context_t>(),
                                                    std::move(interpreter), make_kernel_server,
                                                    std::make_unique<KernelHistory>(), nullptr,
                                                    xeus::make_null_debugger, json::object(),
                                                    json::error_handler_t::replace);
  } catch (const std::exception& e) {
    return Status(ErrorCode::internal, std::string("kernel: cannot open its sockets: ") + e.what());
  }
  self->server_ = &static_cast<KernelServer&>(self->kernel_->get_server());
  KernelWiring wiring = wire_kernel(*self->server_, *self->interpreter_, self->executor_);
  self->publisher_ = std::move(wiring.publisher);
  self->comms_ = std::move(wiring.comms);
  self->counter_ = std::move(wiring.counter);
  const xeus::xconfiguration& bound = self->server_->bound_config();
  auto port = [](const std::string& p) { return std::stoi(p); };
  self->endpoints_ = {{"transport", "tcp"},
                      {"ip", bound.m_ip},
                      {"shell_port", port(bound.m_shell_port)},
                      {"iopub_port", port(bound.m_iopub_port)},
                      {"stdin_port", port(bound.m_stdin_port)},
                      {"control_port", port(bound.m_control_port)},
                      {"hb_port", port(bound.m_hb_port)},
                      {"signature_scheme", "hmac-sha256"},
                      {"kernel_name", "gpubox"}};
  if (!options.connection_file.empty()) {
    json file = self->endpoints_;
    file["key"] = *key;
    if (Status written = write_private_file(options.connection_file, file.dump(2)); !written) return written;
  }
  if (options.preload) {
    // Setup (models) runs now, in the background; requests meanwhile wait for it.
    self->setup_thread_ = std::thread([executor = self->executor_] {
      NullSink sink;
      auto done = executor->request(json{{"type", "is_complete"}, {"code", ""}}, sink);
      if (!done && done.status().code() != ErrorCode::unavailable) {  // unavailable: stopped meanwhile
        std::fprintf(stderr, "gpubox kernel: %s\n", done.status().message().c_str());
      }
    });
  }
  xeus::xkernel* kernel = self->kernel_.get();
  self->thread_ = std::thread([kernel] {
    try {
      kernel->start();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "gpubox kernel: stopped: %s\n", e.what());
    }
  });
  return self;
}

AgentKernel::~AgentKernel() { stop(); }

void AgentKernel::stop() {
  if (server_) server_->stop();
  if (executor_) {
    executor_->stop();
    executor_->set_idle_sink(nullptr);  // it publishes through the server, which goes with kernel_
  }
  if (thread_.joinable()) thread_.join();
  if (setup_thread_.joinable()) setup_thread_.join();
}

void AgentKernel::begin_stop() {
  executor_->shut_down();
  server_->stop();
}

void AgentKernel::interrupt() { server_->interrupt(); }

Result<json> AgentKernel::execute(const json& request, ExecutorSink& sink, std::optional<std::chrono::milliseconds> timeout) {
  if (!request.value("store_history", true) || request.value("silent", false)) {
    return executor_->request(request, sink, timeout);  // hidden: not broadcast
  }
  json parent = publisher_->rpc_request_header();
  int count = request.value("execution_count", 0);
  publisher_->publish("status", {{"execution_state", "busy"}}, parent);
  publisher_->publish("execute_input", {{"code", request.value("code", "")}, {"execution_count", count}}, parent);
  BroadcastSink broadcast(*publisher_, parent, count, sink);
  auto done = executor_->request(request, broadcast, timeout);
  // As for a Jupyter cell, an executor that failed or died has nobody else to say so on iopub.
  if (!done) {
    publisher_->publish_frame({{"type", "error"}, {"ename", "KernelError"}, {"evalue", done.status().message()},
                               {"traceback", json::array({"KernelError: " + done.status().message()})}},
                              count, parent);
  } else if (done->value("died", false)) {
    publisher_->publish_frame(json{{"type", "error"}, {"ename", done->value("ename", "")}, {"evalue", done->value("evalue", "")},
                                   {"traceback", done->value("traceback", json::array())}},
                              count, parent);
  }
  publisher_->publish("status", {{"execution_state", "idle"}}, parent);
  return done;
}

json AgentKernel::endpoints() const { return endpoints_; }

json AgentKernel::status() const {
  return {{"state", "ready"}, {"executor", executor_state(*executor_)}, {"restarts", executor_->restarts()}};
}

json AgentKernel::info() const {
  json info = interpreter_->kernel_info();
  info.erase("status");
  info["executor"] = executor_->info();
  info["restarts"] = executor_->restarts();
  info["busy"] = executor_->busy();
  info["executor_state"] = executor_state(*executor_);
  info["endpoints"] = endpoints_;
  json models = models_->snapshot();
  info["models"] = std::move(models["models"]);
  info["model_info"] = std::move(models["model_info"]);
  return info;
}

int AgentKernel::next_execution_count() { return counter_->next(); }

}  // namespace gpubox::kernel
