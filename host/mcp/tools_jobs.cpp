// submit_job, wait_job, collect_job: batch jobs (rpc/PROTOCOL.md "Jobs").
// wait_job waits in slices of 5 s so a cancelled call stops promptly and
// progress keeps a client's timeout at bay; collect_job downloads and
// extracts the outputs with the host's hardened harvester.
#include <chrono>
#include <filesystem>

#include "host/harvest/harvest_job.h"
#include "host/mcp/tools.h"

namespace gpubox::mcp {
namespace {

using Clock = std::chrono::steady_clock;

ToolResult submit(ToolEnv& env, const json& args) {
  json params = {{"command", args["command"]}};
  for (const char* key : {"env", "timeout_seconds", "intent"}) {
    if (args.contains(key)) params[key] = args[key];
  }
  auto info = call_sandbox(env, args, "job.submit", params);
  if (!info) return ToolResult::from(info.status());
  ToolResult result;
  result.structured = *info;
  return result;
}

ToolResult wait(ToolEnv& env, const json& args, ToolCallContext& context) {
  double timeout = args.value("timeout", 30.0);
  auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<long long>(timeout * 1000));
  while (true) {
    double left = std::chrono::duration<double>(deadline - Clock::now()).count();
    double slice = std::max(0.0, std::min(5.0, left));
    auto info = call_sandbox(env, args, "job.wait", {{"job_id", args["job_id"]}, {"timeout_s", slice}}, std::chrono::seconds(40));
    if (!info) return ToolResult::from(info.status());
    bool finished = info->value("state", "") == "finished";
    if (finished || left <= 0 || context.cancelled()) {
      info->erase("waited_out");
      ToolResult result;
      result.structured = *info;
      result.structured["finished"] = finished;
      return result;
    }
    context.progress("job " + args["job_id"].get<std::string>() + " is " + info->value("state", "?"));
  }
}

ToolResult collect(ToolEnv& env, const json& args) {
  auto record = env.sandboxes.resolve(args);
  if (!record) return ToolResult::from(record.status());
  std::string job = args["job_id"].get<std::string>();
  harvest::HarvestOptions options;
  options.job_id = job;
  options.keep_archive = false;
  options.out_dir = args.value("out_dir", env.results_dir + "/" + record->id + "-" + job);
  std::error_code error;
  if (std::filesystem::exists(options.out_dir, error)) {
    return ToolResult::error("out_dir '" + options.out_dir + "' exists: give a new directory (or the job was collected already)");
  }
  std::filesystem::create_directories(std::filesystem::path(options.out_dir).parent_path(), error);
  auto lease = env.sandboxes.connect(*record);
  if (!lease) return ToolResult::from(lease.status());
  auto harvested = harvest::harvest_job(**lease, options);
  if (!harvested) {
    lease->discard();
    return ToolResult::from(harvested.status());
  }
  ToolResult result;
  const json& job_result = harvested->result;
  result.structured = {{"job_id", job},
                       {"out_dir", std::filesystem::absolute(options.out_dir, error).lexically_normal().string()},
                       {"files", harvested->extracted.files},
                       {"bytes", harvested->extracted.bytes},
                       {"status", job_result.value("status", "")},
                       {"exit_code", job_result.value("exit_code", json())},
                       {"output_files", job_result.value("output_files", json::array())},
                       {"stdout_tail", job_result.value("stdout_tail", json())},
                       {"stderr_tail", job_result.value("stderr_tail", json())}};
  for (const char* key : {"stdout_tail", "stderr_tail"}) {
    if (result.structured[key].is_binary()) result.structured[key] = bytes_of(result.structured[key]);
  }
  return result;
}

}  // namespace

void add_job_tools(ToolRegistry& tools, ToolEnv& env) {
  json job_id = {{"type", "string"}, {"description", "the job's id (job-N), from submit_job"}};
  tools.add({"submit_job", "Start a batch job (a shell command in its own work dir; whatever it writes under $GPUBOX_OUT is kept).",
             tool_schema({{"command", {{"type", "string"}}},
                          {"env", {{"type", "object"}, {"additionalProperties", {{"type", "string"}}}}},
                          {"timeout_seconds", {{"type", "number"}, {"minimum", 0}}},
                          {"intent", {{"type", "string"}, {"description", "what the job is for, for the record"}}}},
                         {"command"})},
            [&env](const json& args, ToolCallContext&) { return submit(env, args); });
  tools.add({"wait_job", "Wait for a job to finish (up to timeout seconds, default 30); its state and result.",
             tool_schema({{"job_id", job_id}, {"timeout", {{"type", "number"}, {"minimum", 0}, {"maximum", 86400}}}}, {"job_id"})},
            [&env](const json& args, ToolCallContext& context) { return wait(env, args, context); });
  tools.add({"collect_job", "Download and extract a finished job's outputs and logs on this host.",
             tool_schema({{"job_id", job_id}, {"out_dir", {{"type", "string"}, {"description", "a new local directory"}}}}, {"job_id"})},
            [&env](const json& args, ToolCallContext&) { return collect(env, args); });
}

}  // namespace gpubox::mcp
