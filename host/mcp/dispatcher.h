// The MCP methods on one stdio connection, minus the running of tools:
// initialize / notifications/initialized / ping / server/discover /
// tools/list answered here; tools/call checked (the tool exists, the
// arguments fit its inputSchema) and handed back to the Server to run;
// notifications/cancelled handed back too. Reader thread only.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "host/mcp/jsonrpc.h"
#include "host/mcp/tool.h"

namespace gpubox::mcp {

struct ServerIdentity {
  std::string name = "gpubox";
  std::string version;
  std::string instructions;
};

// A checked tools/call, for the Server to run.
struct CallRequest {
  json id;
  std::string tool;
  json arguments = json::object();
  json progress_token;  // null when the request had none
  bool modern = false;  // a 2026-07-28 request: the result carries resultType
};

class Dispatcher {
 public:
  Dispatcher(Toolbox& tools, ServerIdentity identity) : tools_(tools), identity_(std::move(identity)) {}
  Dispatcher(const Dispatcher&) = delete;
  Dispatcher& operator=(const Dispatcher&) = delete;

  struct Outcome {
    std::optional<json> reply;       // to write now
    std::optional<CallRequest> call; // to run
    std::optional<json> cancel;      // the requestId a notifications/cancelled names
  };
  Outcome handle(std::string_view line);

  // The version initialize settled on ("" before it).
  const std::string& negotiated_version() const { return negotiated_; }

 private:
  Outcome handle_request(const Message& message);
  json capabilities() const;

  Toolbox& tools_;
  ServerIdentity identity_;
  std::string negotiated_;
};

}  // namespace gpubox::mcp
