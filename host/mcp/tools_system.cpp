// exec (proc.exec), gpu_status (gpu.info, else what sys.info knows),
// processes (proc.list) and snapshot (the sandbox's files and settings).
#include "host/mcp/tools.h"
#include "host/snapshot.h"

namespace gpubox::mcp {
namespace {

ToolResult exec(ToolEnv& env, const json& args, CallContext& context) {
  json params = json::object();
  if (args.contains("command")) params["shell"] = args["command"];
  if (args.contains("argv")) params["argv"] = args["argv"];
  if (params.empty() || params.size() == 2) return ToolResult::error("exec: give exactly one of command (a shell line) and argv");
  for (const char* key : {"cwd", "env"}) {
    if (args.contains(key)) params[key] = args[key];
  }
  if (args.contains("stdin")) params["stdin"] = args["stdin"];
  double timeout = args.value("timeout", 600.0);
  params["timeout_s"] = timeout;
  auto ran = call_sandbox_cancellable(env, args, "proc.exec", params,
                                      std::chrono::milliseconds(static_cast<long long>(timeout * 1000) + 30'000), context);
  if (!ran) return ToolResult::from(ran.status());
  ToolResult result;
  std::string out = bytes_of((*ran)["stdout"]), err = bytes_of((*ran)["stderr"]);
  result.structured = {{"exit_code", (*ran)["exit_code"]},
                       {"signal", (*ran)["signal"]},
                       {"stdout", is_utf8(out) ? out : "(binary, " + std::to_string(out.size()) + " bytes)"},
                       {"stderr", is_utf8(err) ? err : "(binary, " + std::to_string(err.size()) + " bytes)"},
                       {"timed_out", ran->value("timed_out", false)},
                       {"wall_s", ran->value("wall_s", 0.0)}};
  for (const char* key : {"stdout_truncated", "stderr_truncated"}) {
    if (ran->value(key, false)) result.structured[key] = true;
  }
  return result;
}

ToolResult gpu_status(ToolEnv& env, const json& args) {
  auto info = call_sandbox(env, args, "gpu.info", json::object(), std::chrono::seconds(30));
  if (info) {
    ToolResult result;
    result.structured = *info;
    return result;
  }
  // No model host (it serves gpu.*): what the agent itself reports, and why there is no more.
  auto sys = call_sandbox(env, args, "sys.info", json::object(), std::chrono::seconds(30));
  if (!sys) return ToolResult::from(sys.status());
  ToolResult result;
  result.structured = {{"source", "none"},
                       {"gpus", json::array()},
                       {"message", "gpu.info is not available: " + info.status().message()},
                       {"model_host", sys->value("model_host", json::object())},
                       {"components", sys->value("components", json::object())}};
  return result;
}

ToolResult processes(ToolEnv& env, const json& args) {
  auto listed = call_sandbox(env, args, "proc.list", json::object());
  if (!listed) return ToolResult::from(listed.status());
  ToolResult result;
  result.structured = *listed;
  return result;
}

ToolResult snapshot(ToolEnv& env, const json& args) {
  auto record = env.sandboxes.resolve(args);
  if (!record) return ToolResult::from(record.status());
  auto store = host::SandboxStore::open_default();
  if (!store) return ToolResult::from(store.status());
  auto taken = host::take_snapshot(*store, *record, args.value("name", ""));
  if (!taken) return ToolResult::from(taken.status());
  ToolResult result;
  result.structured = {{"snapshot", taken->name}, {"kind", taken->kind}, {"sandbox_id", record->id},
                       {"size_bytes", taken->size_bytes}, {"created_at", taken->created_at}};
  return result;
}

}  // namespace

void add_system_tools(ToolRegistry& tools, ToolEnv& env) {
  tools.add({"exec", "Run a command in the sandbox and return its stdout, stderr and exit code.",
             tool_schema({{"command", {{"type", "string"}, {"description", "a shell command line (/bin/sh -c)"}}},
                          {"argv", {{"type", "array"}, {"items", {{"type", "string"}}}, {"description", "or the program and its arguments"}}},
                          {"cwd", {{"type", "string"}, {"description", "an absolute working directory"}}},
                          {"env", {{"type", "object"}, {"additionalProperties", {{"type", "string"}}}}},
                          {"stdin", {{"type", "string"}}},
                          {"timeout", {{"type", "number"}, {"minimum", 0.001}, {"description", "seconds (default 600)"}}}})},
            [&env](const json& args, CallContext& context) { return exec(env, args, context); });
  tools.add({"gpu_status", "The sandbox's GPUs: names, memory, utilization, driver and CUDA versions, processes.",
             tool_schema(json::object())},
            [&env](const json& args, CallContext&) { return gpu_status(env, args); });
  tools.add({"processes", "The processes running in the sandbox.", tool_schema(json::object())},
            [&env](const json& args, CallContext&) { return processes(env, args); });
  tools.add({"snapshot", "Snapshot the sandbox's files and settings (not its processes); create --from-snapshot restores it.",
             tool_schema({{"name", {{"type", "string"}, {"description", "the snapshot's name (default SANDBOX-DATE-TIME)"}}}})},
            [&env](const json& args, CallContext&) { return snapshot(env, args); });
}

}  // namespace gpubox::mcp
