#include "host/mcp/tools.h"

#include "rpc/protocol.h"

namespace gpubox::mcp {

json tool_schema(json properties, const std::vector<std::string>& required, bool with_handle) {
  if (with_handle) {
    properties["sandbox_id"] = {{"type", "string"},
                                {"description", "the sandbox: its id, a unique prefix of it, or its name (default: gpubox mcp --sandbox)"}};
    properties["session_id"] = {{"type", "string"}, {"description", "a notebook session, in place of sandbox_id once it is bound"}};
  }
  json schema = {{"type", "object"}, {"properties", std::move(properties)}, {"additionalProperties", false}};
  if (!required.empty()) schema["required"] = required;
  return schema;
}

Result<json> call_sandbox(ToolEnv& env, const json& arguments, const std::string& method, const json& params,
                          std::chrono::milliseconds wait) {
  auto record = env.sandboxes.resolve(arguments);
  if (!record) return record.status();
  auto lease = env.sandboxes.connect(*record);
  if (!lease) return lease.status();
  rpc::CallOptions options;
  options.wait = wait;
  auto result = (*lease)->call(method, params, options);
  if (!result && (result.status().code() == ErrorCode::unavailable || result.status().code() == ErrorCode::internal)) {
    lease->discard();
  }
  return result;
}

void send_cancel(rpc::Client& client, std::uint64_t id) {
  rpc::Header cancel;
  cancel.id = id;
  cancel.kind = rpc::Kind::cancel;
  (void)client.send_message(cancel, json::object());
}

Result<json> call_sandbox_cancellable(ToolEnv& env, const json& arguments, const std::string& method, const json& params,
                                      std::chrono::milliseconds wait, ToolCallContext& context) {
  auto record = env.sandboxes.resolve(arguments);
  if (!record) return record.status();
  auto lease = env.sandboxes.connect(*record);
  if (!lease) return lease.status();
  rpc::Client& client = **lease;
  const std::uint64_t id = client.next_id();
  rpc::Header call;
  call.id = id;
  call.kind = rpc::Kind::call;
  call.method = method;
  if (Status sent = client.send_message(call, params); !sent) {
    lease->discard();
    return sent;
  }
  auto give_up = std::chrono::steady_clock::now() + wait;
  while (true) {
    if (context.cancelled() || std::chrono::steady_clock::now() > give_up) {
      send_cancel(client, id);
      lease->discard();
      return Status(ErrorCode::cancelled, context.cancelled() ? method + " cancelled" : method + " did not answer in time");
    }
    auto got = client.receive(id, std::chrono::milliseconds(200));
    if (!got) {
      if (got.status().code() == ErrorCode::unavailable) continue;
      lease->discard();
      return got.status();
    }
    if (got->kind == rpc::Kind::result) return std::move(got->body);
    if (got->kind == rpc::Kind::error) return rpc::status_from_error_body(got->body);
  }
}

std::string bytes_of(const json& value) {
  if (value.is_binary()) return std::string(value.get_binary().begin(), value.get_binary().end());
  if (value.is_string()) return value.get<std::string>();
  return "";
}

bool is_utf8(const std::string& text) {
  for (std::size_t i = 0; i < text.size();) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    std::size_t extra = c < 0x80 ? 0 : (c >> 5) == 0x6 ? 1 : (c >> 4) == 0xE ? 2 : (c >> 3) == 0x1E ? 3 : 4;
    if (extra == 4 || i + extra >= text.size()) return false;
    for (std::size_t k = 1; k <= extra; ++k) {
      if ((static_cast<unsigned char>(text[i + k]) >> 6) != 0x2) return false;
    }
    i += extra + 1;
  }
  return true;
}

std::string strip_ansi(const std::string& text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\x1b' && i + 1 < text.size() && text[i + 1] == '[') {
      std::size_t j = i + 2;
      while (j < text.size() && !(text[j] >= '@' && text[j] <= '~')) ++j;
      i = j;
      continue;
    }
    out += text[i];
  }
  return out;
}

std::unique_ptr<ToolRegistry> full_toolbox(ToolEnv& env) {
  auto tools = std::make_unique<ToolRegistry>();
  add_sandbox_tools(*tools, env);
  add_kernel_tools(*tools, env);
  add_system_tools(*tools, env);
  add_file_tools(*tools, env);
  add_job_tools(*tools, env);
  add_served_tools(*tools, env);
  add_model_tools(*tools, env);
  return tools;
}

}  // namespace gpubox::mcp
