#include "host/mcp/tool.h"

#include <cstring>

#include "host/mcp/jsonrpc.h"

namespace gpubox::mcp {

ToolResult ToolResult::error(const std::string& message, json details) {
  ToolResult result;
  result.is_error = true;
  result.structured = {{"error", message}};
  if (!details.empty()) result.structured["details"] = std::move(details);
  return result;
}

namespace {

// An agent's refusal in the words of this server's tools, not the RPC methods behind them.
std::string in_tool_words(std::string text) {
  const std::pair<const char*, const char*> words[] = {
      {"model.list shows", "list_models shows"}, {"model.hooks lists them", "model_hooks lists them"},
      {"fs.list lists it", "list_files lists it"}, {"params.ops[", "captures["}, {"params.", ""}};
  for (const auto& [from, to] : words) {
    for (auto at = text.find(from); at != std::string::npos; at = text.find(from, at + std::strlen(to))) {
      text.replace(at, std::strlen(from), to);
    }
  }
  return text;
}

}  // namespace

ToolResult ToolResult::from(const Status& status) {
  return error(in_tool_words(status.message()), {{"code", std::string(error_code_name(status.code()))}});
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

// Values shorter than this are written out in the text summary.
constexpr std::size_t kInlineChars = 160;
// A Python error's traceback lines shown in the text summary: its end, where the error is.
constexpr std::size_t kTracebackLines = 8;

// {"ename", "evalue", "traceback": [lines]} (a cell's error) as a reader of text needs it: its name and
// message, and the traceback's last lines.
std::string error_text(const std::string& key, const json& error) {
  std::string out = key + ": " + error.value("ename", "Error") + ": " + error.value("evalue", "") + "\n";
  std::vector<std::string> lines;
  for (const auto& entry : error.value("traceback", json::array())) {
    if (!entry.is_string()) continue;
    std::string text = entry.get<std::string>();
    for (std::size_t at = 0; at <= text.size();) {
      std::size_t end = text.find('\n', at);
      if (end == std::string::npos) end = text.size();
      if (end > at) lines.push_back(text.substr(at, end - at));
      at = end + 1;
    }
  }
  if (lines.empty()) return out;
  std::size_t first = lines.size() > kTracebackLines ? lines.size() - kTracebackLines : 0;
  out += "traceback (last " + std::to_string(lines.size() - first) + " of " + std::to_string(lines.size()) + " lines):\n";
  for (std::size_t i = first; i < lines.size(); ++i) out += "  " + lines[i] + "\n";
  return out;
}

// The result for a reader of text, not the JSON again: a line per field, a
// text field whole (the tools cap them: stdout, a cell's output), a cell's
// error by its name, message and traceback's end, a short value as compact
// JSON, a long list or object by its size.
std::string summary_text(const json& structured) {
  std::string out;
  for (const auto& [key, item] : structured.items()) {
    if (item.is_string()) {
      const auto& text = item.get_ref<const std::string&>();
      if (text.find('\n') == std::string::npos && text.size() <= kInlineChars) {
        out += key + ": " + text + "\n";
      } else {
        out += key + ":\n" + text + (text.empty() || text.back() != '\n' ? "\n" : "");
      }
      continue;
    }
    if (item.is_object() && item.contains("ename")) {
      out += error_text(key, item);
      continue;
    }
    std::string compact = serialize(item);
    if (compact.size() <= kInlineChars) {
      out += key + ": " + compact + "\n";
    } else {
      out += key + ": " + std::to_string(item.size()) + (item.is_array() ? " items" : " fields") +
             " (in structuredContent)\n";
    }
  }
  return out;
}

}  // namespace

json ToolResult::to_json() const {
  // Round-trip through text so that invalid UTF-8 is replaced in structuredContent too.
  json structured_content = json::parse(serialize(textify(structured)), nullptr, false);
  json blocks = json::array({{{"type", "text"}, {"text", summary_text(structured_content)}}});
  for (const auto& block : content) blocks.push_back(block);
  json result = {{"content", std::move(blocks)}, {"structuredContent", std::move(structured_content)}};
  if (is_error) result["isError"] = true;
  return result;
}

void ToolRegistry::add(ToolSpec spec, Handler handler) {
  handlers_[spec.name] = std::move(handler);
  specs_.push_back(std::move(spec));
}

ToolResult ToolRegistry::call(const std::string& name, const json& arguments, ToolCallContext& context) {
  auto found = handlers_.find(name);
  if (found == handlers_.end()) return ToolResult::error("unknown tool '" + name + "'");
  return found->second(arguments, context);
}

}  // namespace gpubox::mcp
