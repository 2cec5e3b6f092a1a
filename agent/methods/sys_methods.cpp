#include <unistd.h>

#include "agent/methods/methods.h"
#include "agent/usage/gpu_inventory.h"
#include "agent/usage/proc_accounting.h"
#include "base/version.h"
#include "rpc/params.h"

namespace gpubox {
namespace {

nlohmann::json optional_number(const std::optional<std::uint64_t>& value) { return value ? nlohmann::json(*value) : nlohmann::json(); }

// sys.usage's result (rpc/PROTOCOL.md, "System"): what the sandbox used so
// far, on the agent's own clock and the kernel's accounting.
nlohmann::json usage_report(double container_s, const AgentAccess& agent) {
  nlohmann::json jobs = agent.job_usage ? agent.job_usage() : nlohmann::json::array();
  for (auto& job : jobs) {
    if (job.contains("session")) {
      job["cpu_s"] = usage::session_cpu_seconds(job["session"].get<pid_t>());
      job["cpu_source"] = "live: /proc of the job's session";
      job.erase("session");
    } else {
      job["cpu_source"] = job["cpu_s"].is_null() ? nlohmann::json() : nlohmann::json("wait4 of the job's shell");
    }
  }
  usage::CgroupUsage cgroup = usage::read_cgroup_usage();
  nlohmann::json cgroup_json = nullptr;
  if (cgroup.cpu_s || !cgroup.memory_path.empty()) {
    cgroup_json = {{"cpu_source", cgroup.cpu_source.empty() ? nlohmann::json() : nlohmann::json(cgroup.cpu_source)},
                   {"cpu_path", cgroup.cpu_path.empty() ? nlohmann::json() : nlohmann::json(cgroup.cpu_path)},
                   {"cpu_s", cgroup.cpu_s ? nlohmann::json(*cgroup.cpu_s) : nlohmann::json()},
                   {"memory_path", cgroup.memory_path.empty() ? nlohmann::json() : nlohmann::json(cgroup.memory_path)},
                   {"memory_peak_bytes", optional_number(cgroup.memory_peak_bytes)},
                   {"memory_current_bytes", optional_number(cgroup.memory_current_bytes)}};
  }
  double tree_cpu_s = usage::process_tree_cpu_seconds();
  if (cgroup.cpu_s) {
    // More CPU than every CPU of the machine could have run since the agent
    // started: the cgroup holds more than the sandbox (the host's root, say).
    long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
    cgroup_json["shared"] = *cgroup.cpu_s > tree_cpu_s + (container_s + 5.0) * static_cast<double>(cpus > 0 ? cpus : 1);
  }
  usage::GpuInventory gpus = usage::probe_gpus();
  return nlohmann::json{
      {"container_s", container_s},
      {"clock", "the agent's monotonic clock since it started"},
      {"cpu_s", tree_cpu_s},
      {"cpu_source", "process tree: getrusage of the agent and every process it reaped, plus /proc of its live descendants"},
      {"memory_peak_bytes", optional_number(cgroup.memory_peak_bytes)},
      {"cgroup", cgroup_json},
      {"gpus", {{"type", gpus.type ? nlohmann::json(*gpus.type) : nlohmann::json()},
                {"count", gpus.count},
                {"models", gpus.models},
                {"source", gpus.source}}},
      {"gpu_s", static_cast<double>(gpus.count) * container_s},
      {"gpu_s_basis", "allocated: GPU count x container seconds, not utilisation"},
      {"jobs", std::move(jobs)},
  };
}

}  // namespace

void add_sys_methods(rpc::MethodRegistry& methods, const AgentAccess& agent, const rpc::Limits& limits) {
  auto started = std::chrono::steady_clock::now();

  methods.add(
      "sys.ping",
      [](rpc::CallContext& call) -> Result<nlohmann::json> {
        nlohmann::json result = {{"pong", true}};
        if (!call.params().empty()) result["echo"] = call.params();
        return result;
      },
      rpc::MethodRegistry::Dispatch::io_thread);

  methods.add("sys.info", [agent, limits, started, &methods](rpc::CallContext& call) -> Result<nlohmann::json> {
    rpc::ParamReader params(call.params());
    if (Status status = params.finish(); !status) return status;
    double uptime = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    return nlohmann::json{
        {"agent_version", kVersion},
        {"protocol_version", rpc::kProtocolVersion},
        {"pid", static_cast<int>(::getpid())},
        {"uptime_s", uptime},
        {"methods", methods.names()},
        {"limits",
         {{"max_message_bytes", limits.max_message_bytes},
          {"max_body_bytes", limits.max_body_bytes},
          {"max_in_flight", limits.max_in_flight},
          {"max_attachments", limits.max_attachments}}},
        {"components", agent.components()},
        {"lifecycle", agent.lifecycle},
        {"seccomp", agent.seccomp},
        {"model_host", agent.model_host ? agent.model_host() : nlohmann::json{{"state", "off"}}},
    };
  });

  methods.add("sys.usage", [agent, started](rpc::CallContext& call) -> Result<nlohmann::json> {
    rpc::ParamReader params(call.params());
    if (Status status = params.finish(); !status) return status;
    double container_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    return usage_report(container_s, agent);
  });

  // On the I/O thread: its RESULT is queued before the I/O thread can see
  // the server stopping. On a worker, the shutdown could tear the server
  // down first and answer the call with "unavailable" instead.
  methods.add(
      "sys.shutdown",
      [agent](rpc::CallContext& call) -> Result<nlohmann::json> {
        rpc::ParamReader params(call.params());
        if (Status status = params.finish(); !status) return status;
        agent.request_shutdown();
        return nlohmann::json{{"shutting_down", true}};
      },
      rpc::MethodRegistry::Dispatch::io_thread);
}

}  // namespace gpubox
