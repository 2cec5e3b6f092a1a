#include "host/mcp/jsonrpc.h"

namespace gpubox::mcp {
namespace {

Parsed error(const json& id, int code, const std::string& message) {
  Parsed parsed;
  parsed.error_reply = make_error(id, code, message);
  return parsed;
}

// True when arrays and objects nest deeper than max_depth (outside strings).
// Checked before parsing: the parsed value's copies and destruction recurse.
bool nests_deeper(std::string_view text, std::size_t max_depth) {
  std::size_t depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return true;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return false;
}

bool valid_id(const json& id) { return id.is_string() || id.is_number_integer() || id.is_number_unsigned(); }

}  // namespace

Parsed parse_message(std::string_view line) {
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.remove_suffix(1);
  while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
  if (line.empty()) return {};
  if (line.size() > kMaxLineBytes) return error(nullptr, rpc_error::kInvalidRequest, "message too large (over 64 MiB)");
  if (nests_deeper(line, kMaxDepth)) {
    return error(nullptr, rpc_error::kInvalidRequest, "invalid request: JSON nested deeper than " + std::to_string(kMaxDepth) + " levels");
  }
  json document = json::parse(line.begin(), line.end(), nullptr, false);
  if (document.is_discarded()) return error(nullptr, rpc_error::kParseError, "parse error: the line is not valid JSON");
  if (document.is_array()) {
    return error(nullptr, rpc_error::kInvalidRequest, "JSON-RPC batches are not supported (MCP removed them); send one message per line");
  }
  if (!document.is_object()) return error(nullptr, rpc_error::kInvalidRequest, "invalid request: expected a JSON object");
  json id = document.contains("id") ? document["id"] : json();
  bool has_id = document.contains("id");
  if (has_id && !valid_id(id)) {
    return error(nullptr, rpc_error::kInvalidRequest, "invalid request: id must be a string or an integer");
  }
  auto version = document.find("jsonrpc");
  if (version == document.end() || *version != "2.0") {
    return error(id, rpc_error::kInvalidRequest, "invalid request: jsonrpc must be \"2.0\"");
  }
  Message message;
  message.id = id;
  auto method = document.find("method");
  if (method == document.end()) {
    if (has_id && (document.contains("result") || document.contains("error"))) {
      message.kind = Message::Kind::response;
      Parsed parsed;
      parsed.message = std::move(message);
      return parsed;
    }
    return error(id, rpc_error::kInvalidRequest, "invalid request: no method");
  }
  if (!method->is_string() || method->get_ref<const std::string&>().empty()) {
    return error(id, rpc_error::kInvalidRequest, "invalid request: method must be a non-empty string");
  }
  message.method = method->get<std::string>();
  message.kind = has_id ? Message::Kind::request : Message::Kind::notification;
  if (auto params = document.find("params"); params != document.end() && !params->is_null()) {
    if (!params->is_object()) {
      if (!has_id) return {};  // a notification gets no reply, even an error
      return error(id, rpc_error::kInvalidParams, "invalid params: params must be an object");
    }
    message.params = *params;
  }
  Parsed parsed;
  parsed.message = std::move(message);
  return parsed;
}

json make_result(const json& id, json result) { return {{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}}; }

json make_error(const json& id, int code, const std::string& message, json data) {
  json error = {{"code", code}, {"message", message}};
  if (!data.is_null()) error["data"] = std::move(data);
  return {{"jsonrpc", "2.0"}, {"id", id}, {"error", std::move(error)}};
}

json make_notification(const std::string& method, json params) {
  return {{"jsonrpc", "2.0"}, {"method", method}, {"params", std::move(params)}};
}

std::string serialize(const json& message) { return message.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace gpubox::mcp
