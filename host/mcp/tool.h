// What an MCP tool is to the server: its listing (name, description,
// inputSchema), its result, and the Toolbox interface that lists tools and
// runs one call. A Toolbox's tools() is called on the reader thread, call()
// on a call's own thread, several at once.
#pragma once

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"

namespace gpubox::mcp {

using nlohmann::json;

struct ToolSpec {
  std::string name;
  std::string description;
  json input_schema = {{"type", "object"}};
};

// A tool's answer. structured becomes structuredContent, and a text summary of
// it (a line per field, not the JSON again) the first text block; content
// holds any further blocks (images).
struct ToolResult {
  json structured = json::object();
  json content = json::array();
  bool is_error = false;

  static ToolResult error(const std::string& message, json details = json::object());
  static ToolResult from(const Status& status);
  // The tools/call result: content (the summary first), structuredContent, isError.
  json to_json() const;
};

// What a running call may ask of the server. Any thread (the call's own).
class ToolCallContext {
 public:
  virtual ~ToolCallContext() = default;
  // True once the client sent notifications/cancelled for this call (or closed stdin).
  virtual bool cancelled() const = 0;
  // A notifications/progress for this call, when its request had a progressToken.
  virtual void progress(const std::string& message) = 0;
};

class Toolbox {
 public:
  virtual ~Toolbox() = default;
  virtual Result<std::vector<ToolSpec>> tools() = 0;
  // REQUIRES: name is one of tools() and arguments passed its input_schema.
  virtual ToolResult call(const std::string& name, const json& arguments, ToolCallContext& context) = 0;
};

// A Toolbox of fixed tools, each a function.
class ToolRegistry : public Toolbox {
 public:
  using Handler = std::function<ToolResult(const json& arguments, ToolCallContext& context)>;
  void add(ToolSpec spec, Handler handler);

  Result<std::vector<ToolSpec>> tools() override { return specs_; }
  ToolResult call(const std::string& name, const json& arguments, ToolCallContext& context) override;

 private:
  std::vector<ToolSpec> specs_;
  std::map<std::string, Handler> handlers_;
};

}  // namespace gpubox::mcp
