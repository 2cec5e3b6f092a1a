// Fuzzes `gpubox mcp`'s message handling (host/mcp/): each input is split
// into lines, as the stdio transport does, and every line goes through one
// Dispatcher (so initialize state carries over) whose toolbox lists a tool
// with a schema of every kind check_arguments knows; tools are never run.
// Every reply must be a JSON-RPC 2.0 response that serializes, and every
// call handed out must have passed its schema.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "host/mcp/dispatcher.h"
#include "host/mcp/schema_check.h"

using namespace gpubox::mcp;

namespace {

void check(bool holds) {
  if (!holds) std::abort();
}

ToolRegistry& toolbox() {
  static ToolRegistry* tools = [] {
    auto* registry = new ToolRegistry();
    json schema = {{"type", "object"},
                   {"properties",
                    {{"code", {{"type", "string"}, {"minLength", 1}}},
                     {"n", {{"type", "integer"}, {"minimum", 0}, {"maximum", 10}}},
                     {"mode", {{"enum", {"a", "b"}}}},
                     {"ids", {{"type", "array"}, {"items", {{"type", "integer"}}}}},
                     {"maybe", {{"anyOf", {{{"type", "null"}}, {{"type", "number"}}}}}},
                     {"env", {{"type", "object"}, {"additionalProperties", {{"type", "string"}}}}}}},
                   {"required", {"code"}},
                   {"additionalProperties", false}};
    registry->add({"tool", "a fuzzed tool", schema}, [](const json&, ToolCallContext&) { return ToolResult(); });
    return registry;
  }();
  return *tools;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 64 * 1024) return -1;
  std::string_view input(reinterpret_cast<const char*>(data), size);  // NOLINT: bytes as chars
  Dispatcher dispatcher(toolbox(), ServerIdentity{});
  auto listed = toolbox().tools();
  const json schema = listed.value()[0].input_schema;
  while (!input.empty()) {
    std::size_t newline = input.find('\n');
    std::string_view line = input.substr(0, newline);
    input.remove_prefix(newline == std::string_view::npos ? input.size() : newline + 1);
    Dispatcher::Outcome outcome = dispatcher.handle(line);
    if (outcome.reply) {
      const json& reply = *outcome.reply;
      check(reply.is_object() && reply.value("jsonrpc", "") == "2.0" && reply.contains("id"));
      check(reply.contains("result") != reply.contains("error"));
      if (reply.contains("error")) check(reply["error"]["code"].is_number_integer() && reply["error"]["message"].is_string());
      std::string text = serialize(reply);
      check(text.find('\n') == std::string::npos);
    }
    if (outcome.call) {
      check(outcome.call->tool == "tool");
      check(check_arguments(schema, outcome.call->arguments).empty());
      check(outcome.call->arguments.is_object() && outcome.call->arguments.contains("code"));
      check(!outcome.reply);
    }
  }
  return 0;
}
