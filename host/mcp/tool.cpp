#include "host/mcp/tool.h"

#include "host/mcp/jsonrpc.h"

namespace gpubox::mcp {

ToolResult ToolResult::error(const std::string& message, json details) {
  ToolResult result;
  result.is_error = true;
  result.structured = {{"error", message}};
  if (!details.empty()) result.structured["details"] = std::move(details);
  return result;
}

ToolResult ToolResult::from(const Status& status) {
  return error(status.message(), {{"code", std::string(error_code_name(status.code()))}});
}

namespace {

// Bytes (msgpack bin from the agent) as text: JSON has no bytes; invalid UTF-8 is replaced when serialized.
json textify(const json& value) {
  if (value.is_binary()) return std::string(value.get_binary().begin(), value.get_binary().end());
  if (value.is_object() || value.is_array()) {
    json out = value;
    for (auto& member : out) member = textify(member);
    return out;
  }
  return value;
}

}  // namespace

json ToolResult::to_json() const {
  json structured_text = textify(structured);
  // Round-trip through text so that invalid UTF-8 is replaced in structuredContent too.
  std::string text = serialize(structured_text);
  json blocks = json::array({{{"type", "text"}, {"text", text}}});
  for (const auto& block : content) blocks.push_back(block);
  json result = {{"content", std::move(blocks)}, {"structuredContent", json::parse(text, nullptr, false)}};
  if (is_error) result["isError"] = true;
  return result;
}

void ToolRegistry::add(ToolSpec spec, Handler handler) {
  handlers_[spec.name] = std::move(handler);
  specs_.push_back(std::move(spec));
}

ToolResult ToolRegistry::call(const std::string& name, const json& arguments, CallContext& context) {
  auto found = handlers_.find(name);
  if (found == handlers_.end()) return ToolResult::error("unknown tool '" + name + "'");
  return found->second(arguments, context);
}

}  // namespace gpubox::mcp
