// `gpubox usage ID`: what a sandbox has used so far — container, CPU and GPU
// seconds and each job's wall and CPU seconds, from its agent's own clock and
// accounting (sys.usage) — beside the resources it was created with, so a
// user can price a run (the priced backend's page of docs/, "Usage and pricing"). `gpubox info`
// shows the same through sandbox_usage().
#include <cstdio>
#include <ctime>
#include <iostream>

#include "base/terminal_text.h"
#include "host/backends/registry.h"
#include "host/cli/cli.h"
#include "host/sandboxes/state.h"

namespace gpubox::host::cli {
namespace {

// A value of the agent's answer as the terminal shows it: nothing sandbox code put in it acts on the terminal.
std::string text_or_dash(const nlohmann::json& value) {
  if (value.is_null()) return "-";
  return escape_for_terminal(value.is_string() ? value.get<std::string>() : value.dump());
}

std::string seconds_text(const nlohmann::json& value) {
  if (!value.is_number()) return "-";
  char text[32];
  std::snprintf(text, sizeof text, "%.2fs", value.get<double>());
  return text;
}

}  // namespace

nlohmann::json requested_resources(const SandboxRecord& record) {
  const auto& spec = record.spec;
  nlohmann::json requested = {{"cpu", spec.value("cpu", 0.0) > 0 ? nlohmann::json(spec.value("cpu", 0.0)) : nlohmann::json()},
                              {"memory_mib", spec.value("memory_mib", 0ULL) ? nlohmann::json(spec.value("memory_mib", 0ULL)) : nlohmann::json()},
                              {"timeout_s", spec.value("timeout_s", 0.0) > 0 ? nlohmann::json(spec.value("timeout_s", 0.0)) : nlohmann::json()},
                              {"enforced_by", spec.value("limits_enforced_by", nlohmann::json::object())}};
  if (const Backend* backend = find_backend(record.backend)) backend->add_requested(record, &requested);
  return requested;
}

Result<nlohmann::json> sandbox_usage(rpc::Client& client) {
  auto usage = client.call("sys.usage", nlohmann::json::object());
  if (!usage && usage.status().code() == ErrorCode::unknown_method) {
    return Status(ErrorCode::unknown_method, "this sandbox's agent predates sys.usage (create it again with this gpubox)");
  }
  return usage;
}

void print_usage_table(const nlohmann::json& usage) {
  std::printf("container:   %s (%s)\n", seconds_text(usage.value("container_s", nlohmann::json())).c_str(),
              text_or_dash(usage.value("clock", nlohmann::json())).c_str());
  std::printf("cpu:         %s (%s)\n", seconds_text(usage.value("cpu_s", nlohmann::json())).c_str(),
              text_or_dash(usage.value("cpu_source", nlohmann::json())).c_str());
  const auto& cgroup = usage.value("cgroup", nlohmann::json());
  if (cgroup.is_object() && cgroup.value("cpu_s", nlohmann::json()).is_number() && !cgroup.value("shared", false)) {
    std::printf("cgroup cpu:  %s (%s, %s: everything in that cgroup)\n", seconds_text(cgroup["cpu_s"]).c_str(),
                text_or_dash(cgroup.value("cpu_source", nlohmann::json())).c_str(), text_or_dash(cgroup.value("cpu_path", nlohmann::json())).c_str());
  }
  if (usage.value("memory_peak_bytes", nlohmann::json()).is_number()) {
    std::printf("memory peak: %.1f MiB (cgroup %s)\n", usage["memory_peak_bytes"].get<double>() / 1048576.0,
                cgroup.is_object() ? text_or_dash(cgroup.value("memory_path", nlohmann::json())).c_str() : "-");
  }
  const auto& gpus = usage.value("gpus", nlohmann::json::object());
  int count = gpus.value("count", 0);
  if (count == 0) {
    std::printf("gpus:        none\n");
  } else {
    std::printf("gpus:        %d x %s, %s GPU-seconds (allocated: count x container seconds)\n", count,
                text_or_dash(gpus.value("type", nlohmann::json("unknown type"))).c_str(),
                seconds_text(usage.value("gpu_s", nlohmann::json())).c_str());
  }
  const auto& jobs = usage.value("jobs", nlohmann::json::array());
  if (jobs.empty()) return;
  std::printf("%-8s  %-9s  %-9s  %-9s\n", "JOB", "STATE", "WALL", "CPU");
  for (const auto& job : jobs) {
    std::printf("%-8s  %-9s  %-9s  %-9s\n", text_or_dash(job.value("job_id", nlohmann::json())).c_str(),
                text_or_dash(job.value("state", nlohmann::json())).c_str(), seconds_text(job.value("wall_s", nlohmann::json())).c_str(),
                seconds_text(job.value("cpu_s", nlohmann::json())).c_str());
  }
}

void print_requested(const nlohmann::json& requested) {
  auto or_default = [](const nlohmann::json& value, const std::string& unit, const char* none) {
    if (value.is_null()) return std::string(none);
    if (!value.is_number()) return text_or_dash(value) + unit;
    char number[32];
    std::snprintf(number, sizeof number, "%g", value.get<double>());
    return number + unit;
  };
  std::string line = "cpu " + or_default(requested.value("cpu", nlohmann::json()), "", "default") + ", memory " +
                     or_default(requested.value("memory_mib", nlohmann::json()), " MiB", "default") + ", timeout " +
                     or_default(requested.value("timeout_s", nlohmann::json()), " s", "none");
  if (requested.contains("region")) {
    const auto& gpu = requested["gpu"];
    std::string gpu_text = gpu.is_object() ? std::to_string(gpu.value("count", 1)) + " x " + text_or_dash(gpu.value("type", nlohmann::json("?"))) : "none";
    line = "gpu " + gpu_text + ", " + line + ", region " + or_default(requested["region"], "", "any");
  }
  std::printf("requested:   %s\n", line.c_str());
}

int run_usage(const std::vector<std::string>& raw, const Global& global) {
  auto priced = control_plane_backend();
  const std::string kUsage =
      "usage: gpubox usage ID|NAME [--json]\n"
      "  container seconds (the agent's own clock), CPU seconds, GPU type, count and GPU-seconds, each job's\n"
      "  wall and CPU seconds, and the resources the sandbox was created with" +
      (priced ? " (to price a run: " + (*priced)->control_plane()->doc + ")" : std::string()) + ".\n";
  auto args = parse_args(raw, {}, {});
  if (!args) return fail_usage("usage", args.status());
  if (args->flag("--help")) return show_usage(kUsage.c_str());
  if (args->positional.size() != 1) return fail_usage("usage", "expected one sandbox id or name");
  auto record = find_sandbox_with_state("usage", args->positional[0]);
  if (!record) return fail("usage", record.status(), exit_code_for(record.status()));
  nlohmann::json report = {{"id", record->id},
                           {"backend", record->backend},
                           {"state", sandbox_state(*record)},
                           {"since_create_s", static_cast<double>(::time(nullptr)) - record->created_at},
                           {"requested", requested_resources(*record)}};
  Status reached = Status(ErrorCode::unavailable, "sandbox " + record->id + " is " + sandbox_state(*record) + ": its agent cannot report usage");
  if (sandbox_state(*record) == "running") {
    auto client = connect_sandbox(*record);
    auto usage = client ? sandbox_usage(**client) : Result<nlohmann::json>(client.status());
    if (usage) {
      report["usage"] = *usage;
      reached = Status::ok();
    } else {
      reached = usage.status();
    }
  }
  if (!reached) report["agent_error"] = reached.to_string();
  int code = reached ? kExitOk : reached.code() == ErrorCode::unavailable ? kExitUnreachable : kExitFailed;
  if (global.json || args->flag("--json")) {
    std::cout << report.dump() << "\n";
    return code;
  }
  std::printf("sandbox:     %s (%s, %s)\n", escape_for_terminal(record->id).c_str(), escape_for_terminal(record->backend).c_str(),
              escape_for_terminal(sandbox_state(*record)).c_str());
  print_requested(report["requested"]);
  if (report.contains("usage")) {
    print_usage_table(report["usage"]);
  } else {
    std::fprintf(stderr, "gpubox usage: %s\n", escape_for_terminal(reached.message(), true).c_str());
  }
  return code;
}

}  // namespace gpubox::host::cli
