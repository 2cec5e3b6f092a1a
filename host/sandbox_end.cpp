#include "host/sandbox_end.h"

#include "host/agent_files.h"
#include "host/resource_limits.h"

namespace gpubox::host {
namespace {

std::string seconds_of(const nlohmann::json& spec, const char* key) {
  double value = spec.value(key, 0.0);
  std::string text = std::to_string(value);
  text.erase(text.find_last_not_of('0') + 1);
  if (!text.empty() && text.back() == '.') text.pop_back();
  return text + " s";
}

}  // namespace

std::string sandbox_end_label(const std::string& reason) {
  if (reason == "shutdown") return "shut down";
  if (reason == "main_command_ended") return "command ended";
  std::string label = reason;
  for (char& c : label) c = c == '_' ? ' ' : c;  // idle timeout, lease expired, out of memory, agent crashed
  return label;
}

SandboxEnd sandbox_end_on_host(const SandboxRecord& record) {
  // The record is a few hundred bytes; anything else in its place is not the agent's.
  auto text = read_agent_file(record.agent_files_dir(), "exit.json", 64 << 10);
  nlohmann::json exit = text ? nlohmann::json::parse(*text, nullptr, false) : nlohmann::json();
  // Why a file there was not taken as the record ("" : there was none).
  std::string not_taken = !text && text.status().code() != ErrorCode::not_found ? " (" + text.status().message() + ")" : "";
  SandboxEnd end;
  if (exit.is_object() && exit.value("reason", nlohmann::json()).is_string()) {
    end.reason = exit["reason"].get<std::string>();
    if (exit.value("exit_code", nlohmann::json()).is_number_integer()) end.exit_code = exit["exit_code"].get<int>();
    std::string detail = exit.value("detail", nlohmann::json()).is_string() ? exit["detail"].get<std::string>() : "";
    const nlohmann::json& spec = record.spec;
    if (end.reason == "terminated") {
      end.message = "it was terminated (" + detail + ")";
    } else if (end.reason == "shutdown") {
      end.message = "it was shut down on request (sys.shutdown)";
    } else if (end.reason == "idle_timeout") {
      end.message = "its idle timeout (" + seconds_of(spec, "idle_timeout_s") + ") passed with no command, job or cell";
    } else if (end.reason == "lease_expired") {
      end.message = "its owner lease expired (no heartbeat came in time)";
    } else if (end.reason == "deadline") {
      end.message = "its --timeout (" + seconds_of(spec, "timeout_s") + ") ran out";
    } else {
      end.message = detail.empty() ? "its agent exited (" + end.reason + ")" : detail;
    }
    return end;
  }
  LimitPlan plan = LimitPlan::from_json(record.spec.value("limit_plan", nlohmann::json::object()));
  if (long long kills = oom_kill_count(plan); kills > 0) {
    end.reason = "out_of_memory";
    end.message = "its agent was killed out of memory (the memory limit is " +
                  std::to_string(record.spec.value("memory_mib", 0ULL)) + " MiB; " + std::to_string(kills) +
                  " OOM kill(s) counted)" + not_taken;
    return end;
  }
  end.reason = "agent_crashed";
  end.message = "its agent crashed or was killed from outside (it left no exit record; `gpubox logs " +
                (record.name.empty() ? record.id : record.name) + "` shows its last lines)" + not_taken;
  return end;
}

}  // namespace gpubox::host
