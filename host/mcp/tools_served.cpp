// Served functions (serve.list / serve.call, rpc/PROTOCOL.md "Served
// functions"): list_served and call_served in the full tool set, and the
// toolbox of `gpubox mcp --service NAME`, whose tools are exactly one
// service's functions. A tensor in a result is described (kind, dtype,
// shape, bytes), not inlined: its bytes travel as raw attachments.
#include <chrono>
#include <mutex>

#include "host/mcp/tools.h"
#include "rpc/client.h"

namespace gpubox::mcp {
namespace {

constexpr std::size_t kMaxItems = 10'000;  // a generator's items kept for one result

// Tensors ({"__gpubox_tensor__": {...}}) as their description, bytes as text.
json describe(const json& value, const std::vector<std::size_t>& attachment_sizes) {
  if (value.is_object()) {
    if (value.size() == 1 && value.contains("__gpubox_tensor__") && value["__gpubox_tensor__"].is_object()) {
      json tensor = value["__gpubox_tensor__"];
      std::size_t bytes = 0;
      for (const auto& index : tensor.value("attachments", json::array())) {
        if (index.is_number_unsigned() && index.get<std::size_t>() < attachment_sizes.size()) bytes += attachment_sizes[index.get<std::size_t>()];
      }
      tensor.erase("attachments");
      tensor["bytes"] = bytes;
      return {{"tensor", tensor}};
    }
    json out = json::object();
    for (const auto& [key, member] : value.items()) out[key] = describe(member, attachment_sizes);
    return out;
  }
  if (value.is_array()) {
    json out = json::array();
    for (const auto& member : value) out.push_back(describe(member, attachment_sizes));
    return out;
  }
  if (value.is_binary()) return bytes_of(value);
  return value;
}

std::vector<std::size_t> sizes_of(const std::vector<zmq::message_t>& attachments) {
  std::vector<std::size_t> sizes;
  for (const auto& frame : attachments) sizes.push_back(frame.size());
  return sizes;
}

// serve.call to its end: RESULT {value} or a generator's DATA {item}s; an
// ERROR `raised` becomes a tool error with the remote type, message and traceback.
ToolResult call_function(Lease& lease, const std::string& service, const std::string& function, const json& args,
                         const json& kwargs, double timeout_s, ToolCallContext& context) {
  rpc::CallOptions options;
  options.timeout_ms = static_cast<std::uint64_t>(timeout_s * 1000);
  json params = {{"service", service}, {"function", function}, {"args", args}, {"kwargs", kwargs}};
  auto opened = lease->stream("serve.call", params, options);
  if (!opened) {
    lease.discard();
    return ToolResult::from(opened.status());
  }
  rpc::Stream& call = **opened;
  // The stream goes before its client does.
  auto drop_client = [&] {
    opened->reset();
    lease.discard();
  };
  json items = json::array();
  auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(options.timeout_ms + 30'000);
  while (true) {
    if (context.cancelled() || std::chrono::steady_clock::now() > give_up) {
      (void)call.cancel();
      drop_client();
      return ToolResult::error(context.cancelled() ? "cancelled" : "serve.call did not answer in time");
    }
    auto got = call.next_within(std::chrono::milliseconds(200));
    if (!got) {
      drop_client();
      return ToolResult::from(got.status());
    }
    if (got->has_value()) {
      rpc::Incoming& item = **got;
      if (items.size() < kMaxItems) items.push_back(describe(item.body.value("item", json()), sizes_of(item.attachments)));
      context.progress("item " + std::to_string(items.size()));
      continue;
    }
    if (call.ended()) break;
  }
  ToolResult result;
  if (call.result()) {
    const json& answer = call.result().value();
    if (answer.contains("items")) {
      result.structured = {{"items", items}, {"count", answer["items"]}};
    } else {
      result.structured = {{"value", describe(answer.value("value", json()), sizes_of(call.take_result_attachments()))}};
    }
    return result;
  }
  const json error = call.error_body().is_object() ? call.error_body() : rpc::error_body(call.result().status());
  std::string code = error.value("code", "internal");
  json details = error.value("details", json::object());
  if (code == "raised") {
    result = ToolResult::error(details.value("type", "Exception") + ": " + details.value("message", error.value("message", "")));
    result.structured["type"] = details.value("type", "");
    result.structured["traceback"] = details.value("traceback", "");
  } else {
    result = ToolResult::error(error.value("message", "serve.call failed"), {{"code", code}});
  }
  return result;
}

ToolResult call_served(ToolEnv& env, const json& args, ToolCallContext& context) {
  auto record = env.sandboxes.resolve(args);
  if (!record) return ToolResult::from(record.status());
  auto lease = env.sandboxes.connect(*record);
  if (!lease) return ToolResult::from(lease.status());
  return call_function(*lease, args["service"].get<std::string>(), args["function"].get<std::string>(),
                       args.value("args", json::array()), args.value("kwargs", json::object()), args.value("timeout", 600.0),
                       context);
}

ToolResult list_served(ToolEnv& env, const json& args) {
  auto listed = call_sandbox(env, args, "serve.list", json::object());
  if (!listed) return ToolResult::from(listed.status());
  ToolResult result;
  result.structured = *listed;
  return result;
}

// The tools of one service, listed from serve.list each time they are asked for.
class ServiceToolbox : public Toolbox {
 public:
  ServiceToolbox(ToolEnv& env, std::string sandbox, std::string service)
      : env_(env), sandbox_(std::move(sandbox)), service_(std::move(service)) {}

  Result<std::vector<ToolSpec>> tools() override {
    auto listed = call_sandbox(env_, {{"sandbox_id", sandbox_}}, "serve.list", json::object(), std::chrono::seconds(30));
    if (!listed) return listed.status();
    for (const auto& service : listed->value("services", json::array())) {
      if (service.value("name", "") != service_) continue;
      std::vector<ToolSpec> specs;
      for (const auto& function : service.value("functions", json::array())) {
        ToolSpec spec;
        spec.name = function.value("name", "");
        std::string doc = function.value("doc", "");
        spec.description = !doc.empty() ? doc : function.value("description", "");
        if (spec.description.empty()) spec.description = spec.name + function.value("signature", "");
        json schema = function.value("input_schema", json::object());
        if (!schema.is_object()) schema = json::object();
        if (!schema.contains("type")) schema["type"] = "object";
        spec.input_schema = std::move(schema);
        specs.push_back(std::move(spec));
      }
      return specs;
    }
    return Status(ErrorCode::not_found, "sandbox " + sandbox_ + " serves no service '" + service_ + "' (serve.list)");
  }

  ToolResult call(const std::string& name, const json& arguments, ToolCallContext& context) override {
    auto record = env_.sandboxes.resolve_name(sandbox_);
    if (!record) return ToolResult::from(record.status());
    auto lease = env_.sandboxes.connect(*record);
    if (!lease) return ToolResult::from(lease.status());
    return call_function(*lease, service_, name, json::array(), arguments, 600.0, context);
  }

 private:
  ToolEnv& env_;
  std::string sandbox_;
  std::string service_;
};

}  // namespace

void add_served_tools(ToolRegistry& tools, ToolEnv& env) {
  tools.add({"list_served", "The sandbox's served functions (services started from an interface.py with @expose), with their signatures.",
             tool_schema(json::object())},
            [&env](const json& args, ToolCallContext&) { return list_served(env, args); });
  tools.add({"call_served", "Call a served function: positional args and keyword kwargs; returns its value (a generator: its items).",
             tool_schema({{"service", {{"type", "string"}}},
                          {"function", {{"type", "string"}}},
                          {"args", {{"type", "array"}}},
                          {"kwargs", {{"type", "object"}}},
                          {"timeout", {{"type", "number"}, {"minimum", 0.001}, {"description", "seconds (default 600)"}}}},
                         {"service", "function"})},
            [&env](const json& args, ToolCallContext& context) { return call_served(env, args, context); });
}

std::unique_ptr<Toolbox> service_toolbox(ToolEnv& env, std::string sandbox, std::string service) {
  return std::make_unique<ServiceToolbox>(env, std::move(sandbox), std::move(service));
}

}  // namespace gpubox::mcp
