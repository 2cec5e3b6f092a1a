// serve.start, serve.stop, serve.list, serve.call, serve.logs: functions of a
// user's interface.py served from a supervised Python worker (agent/serve/).
// Params are checked here; the manager and its services do the rest.
#include "agent/methods/methods.h"
#include "agent/serve/serve_manager.h"

namespace gpubox {

using nlohmann::json;

namespace {

Status need_string(const json& params, const char* key) {
  if (!params.contains(key) || !params[key].is_string() || params[key].get<std::string>().empty()) {
    return Status(ErrorCode::invalid_request, std::string(key) + ": expected a non-empty string");
  }
  return Status::ok();
}

Status check_call_params(const json& params) {
  if (Status ok = need_string(params, "service"); !ok) return ok;
  if (Status ok = need_string(params, "function"); !ok) return ok;
  if (params.contains("args") && !params["args"].is_array()) {
    return Status(ErrorCode::invalid_request, "args: expected an array of positional arguments");
  }
  if (params.contains("kwargs") && !params["kwargs"].is_object()) {
    return Status(ErrorCode::invalid_request, "kwargs: expected a map of keyword arguments");
  }
  return Status::ok();
}

}  // namespace

void add_serve_methods(rpc::MethodRegistry& methods, serve::ServeManager& manager, const AgentAccess& agent) {
  methods.add("serve.start", [&manager, agent](rpc::CallContext& call) -> Result<json> {
    if (agent.accepting_work && !agent.accepting_work()) return Status(ErrorCode::unavailable, "the agent is shutting down");
    return manager.start(call);
  });
  methods.add("serve.stop", [&manager](rpc::CallContext& call) -> Result<json> {
    if (Status ok = need_string(call.params(), "name"); !ok) return ok;
    if (Status stopped = manager.stop(call.params()["name"].get<std::string>()); !stopped) return stopped;
    return json::object();
  });
  methods.add("serve.list", [&manager](rpc::CallContext&) -> Result<json> { return manager.list(); });
  methods.add(
      "serve.call",
      [&manager](rpc::CallContext& call) -> Result<json> {
        if (Status ok = check_call_params(call.params()); !ok) return ok;
        return manager.call(call);
      },
      [&manager](const std::shared_ptr<rpc::CallContext>& call) {
        return check_call_params(call->params()).is_ok() && manager.take_call(call);
      });
  methods.add("serve.logs", [&manager](rpc::CallContext& call) -> Result<json> {
    const json& params = call.params();
    if (Status ok = need_string(params, "name"); !ok) return ok;
    std::size_t tail = 0;
    if (params.contains("tail_bytes")) {
      if (!params["tail_bytes"].is_number_unsigned()) {
        return Status(ErrorCode::invalid_request, "tail_bytes: expected a non-negative integer");
      }
      tail = params["tail_bytes"].get<std::size_t>();
    }
    return manager.logs(params["name"].get<std::string>(), tail);
  });
}

}  // namespace gpubox
