#include <unistd.h>

#include "agent/methods/methods.h"
#include "agent/version.h"
#include "rpc/params.h"

namespace gpubox {

void add_sys_methods(rpc::MethodRegistry& methods, const AgentHooks& hooks, const rpc::Limits& limits) {
  auto started = std::chrono::steady_clock::now();

  methods.add(
      "sys.ping",
      [](rpc::CallContext& call) -> Result<nlohmann::json> {
        nlohmann::json result = {{"pong", true}};
        if (!call.params().empty()) result["echo"] = call.params();
        return result;
      },
      rpc::MethodRegistry::Dispatch::io_thread);

  methods.add("sys.info", [hooks, limits, started, &methods](rpc::CallContext& call) -> Result<nlohmann::json> {
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
        {"components", hooks.components()},
        {"model_host", hooks.model_host ? hooks.model_host() : nlohmann::json{{"state", "off"}}},
    };
  });

  // On the I/O thread: its RESULT is queued before the I/O thread can see
  // the server stopping. On a worker, the shutdown could tear the server
  // down first and answer the call with "unavailable" instead.
  methods.add(
      "sys.shutdown",
      [hooks](rpc::CallContext& call) -> Result<nlohmann::json> {
        rpc::ParamReader params(call.params());
        if (Status status = params.finish(); !status) return status;
        hooks.request_shutdown();
        return nlohmann::json{{"shutting_down", true}};
      },
      rpc::MethodRegistry::Dispatch::io_thread);
}

}  // namespace gpubox
