// The gpubox tool set of `gpubox mcp`, one group per file (tools_*.cpp), and
// what the groups share: where sandboxes and notebooks are, schema helpers,
// and one RPC call on a leased connection. Handlers run on their call's thread.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "host/mcp/notebook.h"
#include "host/mcp/sandboxes.h"
#include "host/mcp/tool.h"

namespace gpubox::mcp {

struct ToolEnv {
  Sandboxes& sandboxes;
  Notebooks& notebooks;
  std::string cli_path;     // this gpubox binary (create_sandbox runs `gpubox create`)
  std::string results_dir;  // where collect_job extracts outputs by default
};

void add_sandbox_tools(ToolRegistry& tools, ToolEnv& env);  // create_sandbox, list_sandboxes, terminate_sandbox
void add_kernel_tools(ToolRegistry& tools, ToolEnv& env);   // execute_code, add_markdown
void add_file_tools(ToolRegistry& tools, ToolEnv& env);     // read_file, write_file, list_files
void add_system_tools(ToolRegistry& tools, ToolEnv& env);   // exec, gpu_status, processes, snapshot
void add_job_tools(ToolRegistry& tools, ToolEnv& env);      // submit_job, wait_job, collect_job
void add_served_tools(ToolRegistry& tools, ToolEnv& env);   // list_served, call_served
void add_model_tools(ToolRegistry& tools, ToolEnv& env);    // tokenize, generate, run_model

// Every tool of plain `gpubox mcp`.
std::unique_ptr<ToolRegistry> full_toolbox(ToolEnv& env);
// `gpubox mcp --sandbox X --service NAME`: tools are exactly that service's functions.
std::unique_ptr<Toolbox> service_toolbox(ToolEnv& env, std::string sandbox, std::string service);

// {"type": "object", "properties": {sandbox_id, session_id, ...properties}, "required": required, "additionalProperties": false}
json tool_schema(json properties, const std::vector<std::string>& required = {}, bool with_handle = true);

// One RPC call on the sandbox the arguments name; wait bounds how long an answer may take.
Result<json> call_sandbox(ToolEnv& env, const json& arguments, const std::string& method, const json& params,
                          std::chrono::milliseconds wait = std::chrono::seconds(60));
// The same, given up (CANCEL sent to the agent, which stops the work) once the call is cancelled.
Result<json> call_sandbox_cancellable(ToolEnv& env, const json& arguments, const std::string& method, const json& params,
                                      std::chrono::milliseconds wait, ToolCallContext& context);
// Bytes of a result field (msgpack bin or str) as a string.
// Sends CANCEL for request id (best effort: the request may have ended already).
void send_cancel(rpc::Client& client, std::uint64_t id);

std::string bytes_of(const json& value);
// Valid UTF-8?
bool is_utf8(const std::string& text);
// IPython's ANSI colours out of a traceback line.
std::string strip_ansi(const std::string& text);

}  // namespace gpubox::mcp
