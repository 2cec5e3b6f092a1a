#include "host/mcp/dispatcher.h"

#include "host/mcp/schema_check.h"
#include "host/mcp/versions.h"

namespace gpubox::mcp {
namespace {

Dispatcher::Outcome reply(json message) {
  Dispatcher::Outcome outcome;
  outcome.reply = std::move(message);
  return outcome;
}

// A 2026-07-28 result says what it is; listings say how long they may be cached.
json modern_result(json result, bool cacheable) {
  result["resultType"] = "complete";
  if (cacheable) {
    result["ttlMs"] = 0;
    result["cacheScope"] = "private";
  }
  return result;
}

}  // namespace

json Dispatcher::capabilities() const { return {{"tools", {{"listChanged", false}}}}; }

Dispatcher::Outcome Dispatcher::handle(std::string_view line) {
  Parsed parsed = parse_message(line);
  if (parsed.error_reply) return reply(std::move(*parsed.error_reply));
  if (!parsed.message) return {};
  const Message& message = *parsed.message;
  switch (message.kind) {
    case Message::Kind::response:
      return {};  // gpubox sends no requests of its own; stray responses are dropped
    case Message::Kind::notification:
      if (message.method == "notifications/cancelled") {
        Outcome outcome;
        if (auto id = message.params.find("requestId"); id != message.params.end()) outcome.cancel = *id;
        return outcome;
      }
      return {};  // notifications/initialized and any other: nothing to answer
    case Message::Kind::request:
      return handle_request(message);
  }
  return {};
}

Dispatcher::Outcome Dispatcher::handle_request(const Message& message) {
  const json& id = message.id;
  const json& params = message.params;
  std::optional<std::string> version = request_version(params);
  bool modern = version && is_modern(*version);
  // A per-request version must be one gpubox speaks; server/discover answers any (it lists them).
  if (version && !is_supported(*version) && message.method != "server/discover" && message.method != "initialize") {
    return reply(make_error(id, rpc_error::kUnsupportedProtocolVersion,
                            "unsupported protocol version '" + *version + "'",
                            {{"supported", supported_versions()}, {"requested", *version}}));
  }

  if (message.method == "initialize") {
    std::string requested = params.value("protocolVersion", std::string());
    if (!params.contains("protocolVersion") || !params["protocolVersion"].is_string()) {
      return reply(make_error(id, rpc_error::kInvalidParams, "invalid params: params.protocolVersion: expected a string"));
    }
    negotiated_ = negotiate_handshake(requested);
    json result = {{"protocolVersion", negotiated_},
                   {"capabilities", capabilities()},
                   {"serverInfo", {{"name", identity_.name}, {"version", identity_.version}}}};
    if (!identity_.instructions.empty()) result["instructions"] = identity_.instructions;
    return reply(make_result(id, std::move(result)));
  }
  if (message.method == "server/discover") {
    json result = {{"supportedVersions", supported_versions()},
                   {"capabilities", capabilities()},
                   {"serverInfo", {{"name", identity_.name}, {"version", identity_.version}}},
                   {"_meta", {{"io.modelcontextprotocol/serverInfo", {{"name", identity_.name}, {"version", identity_.version}}}}}};
    if (!identity_.instructions.empty()) result["instructions"] = identity_.instructions;
    return reply(make_result(id, modern_result(std::move(result), true)));
  }
  if (message.method == "ping") return reply(make_result(id, modern ? modern_result(json::object(), false) : json::object()));
  if (message.method == "tools/list") {
    if (auto cursor = params.find("cursor"); cursor != params.end() && !cursor->is_string() && !cursor->is_null()) {
      return reply(make_error(id, rpc_error::kInvalidParams, "invalid params: params.cursor: expected a string"));
    }
    auto listed = tools_.tools();
    if (!listed) return reply(make_error(id, rpc_error::kInternalError, "cannot list the tools: " + listed.status().message()));
    json tools = json::array();
    for (const auto& spec : *listed) {
      tools.push_back({{"name", spec.name}, {"description", spec.description}, {"inputSchema", spec.input_schema}});
    }
    // One page holds every tool: a cursor (which gpubox never hands out) gets the same whole list.
    json result = {{"tools", std::move(tools)}};
    return reply(make_result(id, modern ? modern_result(std::move(result), true) : std::move(result)));
  }
  if (message.method == "tools/call") {
    auto name = params.find("name");
    if (name == params.end() || !name->is_string()) {
      return reply(make_error(id, rpc_error::kInvalidParams, "invalid params: params.name: expected the tool's name as a string"));
    }
    json arguments = params.contains("arguments") && !params["arguments"].is_null() ? params["arguments"] : json::object();
    if (!arguments.is_object()) {
      return reply(make_error(id, rpc_error::kInvalidParams, "invalid params: params.arguments: expected an object"));
    }
    auto listed = tools_.tools();
    if (!listed) return reply(make_error(id, rpc_error::kInternalError, "cannot list the tools: " + listed.status().message()));
    const ToolSpec* spec = nullptr;
    for (const auto& one : *listed) {
      if (one.name == *name) spec = &one;
    }
    if (!spec) {
      return reply(make_error(id, rpc_error::kInvalidParams, "unknown tool '" + name->get<std::string>() + "' (tools/list names them)",
                              {{"tool", *name}}));
    }
    std::string problem = check_arguments(spec->input_schema, arguments);
    if (!problem.empty()) {
      std::string field = problem.substr(0, problem.find(':'));
      return reply(make_error(id, rpc_error::kInvalidParams, "invalid arguments for tool '" + spec->name + "': " + problem,
                              {{"tool", spec->name}, {"field", field}}));
    }
    Outcome outcome;
    CallRequest call;
    call.id = id;
    call.tool = spec->name;
    call.arguments = std::move(arguments);
    call.modern = modern;
    if (auto meta = params.find("_meta"); meta != params.end() && meta->is_object() && meta->contains("progressToken")) {
      const json& token = (*meta)["progressToken"];
      if (token.is_string() || token.is_number_integer()) call.progress_token = token;
    }
    outcome.call = std::move(call);
    return outcome;
  }
  return reply(make_error(id, rpc_error::kMethodNotFound, "method not found: '" + message.method + "' (gpubox serves tools only)"));
}

}  // namespace gpubox::mcp
