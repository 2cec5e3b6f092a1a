// The agent's RPC methods, registered on a MethodRegistry. Handlers run on
// the RPC server's worker threads (sys.ping on its I/O thread).
#pragma once

#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>

#include "agent/process_table.h"
#include "rpc/server.h"

namespace gpubox {

class ModeldSupervisor;
class Watchdogs;
namespace jobs {
class JobManager;
}
namespace kernel {
class AgentKernel;
}
namespace serve {
class ServeManager;
}

// What the methods may ask of the rest of the agent. Every function may be
// called from any thread.
struct AgentAccess {
  // Starts the agent's graceful shutdown.
  std::function<void()> request_shutdown;
  // Readiness of each component: {"rpc": {"state": "ready"}, "children": {...}}.
  std::function<nlohmann::json()> components;
  // False once shutdown began: methods that start work refuse it.
  std::function<bool()> accepting_work;
  // Environment overrides applied to every process the agent starts (config env and secrets).
  std::vector<std::pair<std::string, std::string>> child_env;
  // sys.info's lifecycle: the deadlines the agent keeps, {"timeout_s", "idle_timeout_s"} (0: none).
  nlohmann::json lifecycle = nlohmann::json::object();
  // sys.info's seccomp: {"profile": "default"|"unconfined", "denied": [names]}.
  nlohmann::json seccomp = nlohmann::json::object();
  // sys.info's model_host: {"state": "off"} without a model_host section.
  std::function<nlohmann::json()> model_host;
  // sys.usage's jobs (JobManager::usage); null: no jobs.
  std::function<nlohmann::json()> job_usage;
};

// sys.ping, sys.info, sys.usage, sys.shutdown.
void add_sys_methods(rpc::MethodRegistry& methods, const AgentAccess& agent, const rpc::Limits& limits);
// proc.exec, proc.spawn, proc.signal, proc.list.
void add_proc_methods(rpc::MethodRegistry& methods, ProcessLauncher& launcher, const AgentAccess& agent);
// fs.read, fs.write, fs.list, fs.stat, fs.mkdir, fs.remove, fs.move.
void add_fs_methods(rpc::MethodRegistry& methods);
// job.submit, job.wait, job.list, job.cancel, job.ack, job.download, job.logs.
void add_job_methods(rpc::MethodRegistry& methods, jobs::JobManager& manager, const AgentAccess& agent);
// kernel.execute, kernel.interrupt, kernel.restart, kernel.complete, kernel.inspect, kernel.info.
// get_kernel returns null while the kernel is disabled; default_timeout 0: none.
void add_kernel_methods(rpc::MethodRegistry& methods, std::function<kernel::AgentKernel*()> get_kernel,
                        std::chrono::milliseconds default_timeout);
// kernel.relay: Jupyter frontends' messages to and from the kernel's sockets
// (gpubox attach); the kernel's HMAC key is read from connection_file.
void add_kernel_relay_method(rpc::MethodRegistry& methods, std::function<kernel::AgentKernel*()> get_kernel,
                             std::string connection_file);
// Every model.* and gpu.* method: forwarded to gpubox-modeld (model_forwarder.cpp).
// modeld is null when the config has no model_host section; it must outlive the server.
void add_modeld_forwarders(rpc::MethodRegistry& methods, const ModeldSupervisor* modeld);
// serve.start, serve.stop, serve.list, serve.call, serve.logs; the manager must outlive the server.
void add_serve_methods(rpc::MethodRegistry& methods, serve::ServeManager& manager, const AgentAccess& agent);
// sys.heartbeat (the owner lease).
void add_lifecycle_methods(rpc::MethodRegistry& methods, Watchdogs& watchdogs);

}  // namespace gpubox
