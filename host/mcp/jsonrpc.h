// JSON-RPC 2.0 framing of MCP's stdio transport: one message per line.
// parse_message() turns one line into a request, a notification or a
// response, or into the error reply the line deserves. Pure functions, any thread.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace gpubox::mcp {

using nlohmann::json;

// JSON-RPC's error codes and the MCP ones gpubox sends.
namespace rpc_error {
inline constexpr int kParseError = -32700;
inline constexpr int kInvalidRequest = -32600;
inline constexpr int kMethodNotFound = -32601;
inline constexpr int kInvalidParams = -32602;
inline constexpr int kInternalError = -32603;
inline constexpr int kUnsupportedProtocolVersion = -32022;  // 2026-07-28
}  // namespace rpc_error

// One message read from the client.
struct Message {
  enum class Kind { request, notification, response };
  Kind kind = Kind::request;
  json id;  // request and response: a string or an integer
  std::string method;
  json params = json::object();  // always an object (absent params read as {})
};

// The outcome of parsing one line: a message, or the error reply to send
// (id null when none could be read), or neither for a blank line.
struct Parsed {
  std::optional<Message> message;
  std::optional<json> error_reply;
};

// The largest line accepted; a longer one is answered with invalid request.
inline constexpr std::size_t kMaxLineBytes = 64u << 20;
// The deepest nesting of arrays and objects accepted (invalid request beyond).
inline constexpr std::size_t kMaxDepth = 128;

Parsed parse_message(std::string_view line);

json make_result(const json& id, json result);
json make_error(const json& id, int code, const std::string& message, json data = nullptr);
json make_notification(const std::string& method, json params);
// The text of a message for the wire: compact, invalid UTF-8 replaced, no newline inside.
std::string serialize(const json& message);

}  // namespace gpubox::mcp
