// exec (proc.exec), gpu_status (gpu.info, else what sys.info knows),
// processes (proc.list) and snapshot (the sandbox's files and settings).
#include "host/mcp/tools.h"
#include "host/snapshot.h"
#include "host/sandboxes/snapshots.h"

namespace gpubox::mcp {
namespace {

constexpr std::size_t kMaxSystemStreamText = 256 << 10;  // as execute_code: an agent reads this much at most
constexpr std::size_t kFileChunk = 1 << 20;

// Saves a stream's whole output in the sandbox (fs.write, its bytes as the CALL's attachments).
Status save_in_sandbox(ToolEnv& env, const json& args, const std::string& path, const std::string& bytes) {
  auto record = env.sandboxes.resolve(args);
  if (!record) return record.status();
  auto lease = env.sandboxes.connect(*record);
  if (!lease) return lease.status();
  std::vector<zmq::message_t> parts;
  for (std::size_t at = 0; at < bytes.size(); at += kFileChunk) {
    parts.emplace_back(bytes.data() + at, std::min(kFileChunk, bytes.size() - at));
  }
  rpc::CallOptions options;
  options.attachments = &parts;
  options.wait = std::chrono::seconds(60);
  auto written = (*lease)->call("fs.write", {{"path", path}, {"parents", true}}, options);
  return written ? Status::ok() : written.status();
}

// A stream of exec's result: all of it when it fits, else its first 256 KiB
// and where in the sandbox all of it was saved (also under NAME_file).
void put_stream(ToolEnv& env, const json& args, const char* name, const std::string& bytes, json* structured) {
  bool text = is_utf8(bytes);
  if (bytes.size() <= kMaxSystemStreamText) {
    (*structured)[name] = text ? bytes : "(binary, " + std::to_string(bytes.size()) + " bytes)";
    return;
  }
  std::size_t cut = kMaxSystemStreamText;
  while (cut > 0 && (static_cast<unsigned char>(bytes[cut]) & 0xC0) == 0x80) --cut;  // not inside a character
  auto millis = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch());
  std::string path = "/workspace/.gpubox/exec/" + std::to_string(millis.count()) + "." + name;
  Status saved = save_in_sandbox(env, args, path, bytes);
  std::string where = saved ? "all " + std::to_string(bytes.size()) + " bytes are in " + path + " (read_file)"
                            : "the rest could not be saved in the sandbox: " + saved.message();
  (*structured)[name] = (text ? bytes.substr(0, cut) : "(binary)") + "\n[output cut at 256 KiB here; " + where + "]\n";
  if (saved) (*structured)[std::string(name) + "_file"] = path;
}

ToolResult exec(ToolEnv& env, const json& args, ToolCallContext& context) {
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
                       {"timed_out", ran->value("timed_out", false)},
                       {"wall_s", ran->value("wall_s", 0.0)}};
  put_stream(env, args, "stdout", out, &result.structured);
  put_stream(env, args, "stderr", err, &result.structured);
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
            [&env](const json& args, ToolCallContext& context) { return exec(env, args, context); });
  tools.add({"gpu_status", "The sandbox's GPUs: names, memory, utilization, driver and CUDA versions, processes.",
             tool_schema(json::object())},
            [&env](const json& args, ToolCallContext&) { return gpu_status(env, args); });
  tools.add({"processes", "The processes running in the sandbox.", tool_schema(json::object())},
            [&env](const json& args, ToolCallContext&) { return processes(env, args); });
  tools.add({"snapshot", "Snapshot the sandbox's files and settings (not its processes); create --from-snapshot restores it.",
             tool_schema({{"name", {{"type", "string"}, {"description", "the snapshot's name (default SANDBOX-DATE-TIME)"}}}})},
            [&env](const json& args, ToolCallContext&) { return snapshot(env, args); });
}

}  // namespace gpubox::mcp
