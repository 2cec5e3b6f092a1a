// `gpubox ls`, `gpubox info ID` and `gpubox logs ID [-f]`: what the host knows
// of its sandboxes, and what their agents say.
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <thread>

#include "base/terminal_text.h"
#include "host/agent_files.h"
#include "host/backends/registry.h"
#include "host/cli/cli.h"
#include "host/program_run.h"
#include "host/resource_limits.h"
#include "host/sandbox_end.h"
#include "host/sandboxes/state.h"

namespace gpubox::host::cli {
namespace {

std::string age(double created_at) {
  long seconds = static_cast<long>(static_cast<double>(::time(nullptr)) - created_at);
  if (seconds < 0) seconds = 0;
  if (seconds < 120) return std::to_string(seconds) + "s ago";
  if (seconds < 7200) return std::to_string(seconds / 60) + "m ago";
  if (seconds < 172800) return std::to_string(seconds / 3600) + "h ago";
  return std::to_string(seconds / 86400) + "d ago";
}

nlohmann::json summary(const SandboxRecord& record) {
  nlohmann::json json = {{"id", record.id},         {"name", record.name},         {"backend", record.backend},
                         {"state", sandbox_state(record)}, {"endpoint", record.endpoint}, {"agent_pid", record.agent.pid},
                         {"created_at", record.created_at}};
  if (json["state"] == "dead") {
    SandboxEnd end = sandbox_end(record);
    json["ended"] = {{"reason", end.reason}, {"message", end.message}};
    if (end.exit_code) json["ended"]["agent_exit_code"] = *end.exit_code;
  }
  return json;
}

// "running", or "dead (idle timeout)": the state as ls and info print it.
std::string state_text(const nlohmann::json& summary) {
  std::string state = summary.value("state", "");
  if (summary.contains("ended")) state += " (" + sandbox_end_label(summary["ended"].value("reason", "")) + ")";
  return state;
}

// "remote_id" -> "REMOTE ID": a key as a column's header.
std::string upper_words(std::string key) {
  for (char& c : key) c = c == '_' ? ' ' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return key;
}

// `gpubox ls --remote`: what the control plane runs in the app, by gpubox's tag, beside the local records.
int list_remote(const Args& args, const Global& global, const SandboxStore& store) {
  auto backend = control_plane_backend(args.last("--backend").value_or(""));
  if (!backend) return fail("ls", backend.status(), kExitUsage);
  const ControlPlane& plane = *(*backend)->control_plane();
  auto listed = (*backend)->list_remote(args.last("--namespace").value_or(args.last("--app").value_or("")));
  if (!listed) return fail("ls", listed.status(), exit_code_for(listed.status()));
  std::map<std::string, std::string> known;
  for (const auto& record : store.list()) {
    if (record.backend == (*backend)->name()) known[(*backend)->remote_id(record)] = record.id;
  }
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& sandbox : (*listed)["sandboxes"]) {
    std::string remote_id = sandbox.value(plane.id_key, "");
    rows.push_back({{plane.id_key, remote_id}, {"gpubox_id", sandbox.value("gpubox_id", "")},
                    {"in_store", known.count(remote_id) > 0}, {"tags", sandbox.value("tags", nlohmann::json::object())}});
  }
  if (global.json || args.flag("--json")) {
    std::cout << rows.dump() << "\n";
    return kExitOk;
  }
  std::printf("%-28s  %-12s  %s\n", upper_words(plane.id_key).c_str(), "GPUBOX ID", "HERE");
  for (const auto& row : rows) {
    // Tags are what whoever runs in the control plane's app set.
    std::printf("%-28s  %-12s  %s\n", escape_for_terminal(row[plane.id_key].get<std::string>()).c_str(),
                escape_for_terminal(row["gpubox_id"].get<std::string>()).c_str(),
                row["in_store"].get<bool>() ? "yes" : "no (gpubox adopt)");
  }
  return kExitOk;
}

// "ended on X" for each backend's own end: the reasons ls prints past the agent's own.
std::string own_end_labels() {
  std::string labels;
  for (const Backend* backend : all_backends()) {
    if (!backend->own_end_reason().empty()) labels += ", " + sandbox_end_label(backend->own_end_reason());
  }
  return labels;
}

}  // namespace

int run_ls(const std::vector<std::string>& raw, const Global& global) {
  auto default_plane = control_plane_backend();
  const std::string kUsage =
      "usage: gpubox ls [--json] [--remote [--backend NAME] [--app NAME]]\n"
      "  STATE is creating, running, or dead with how it ended (terminated, shut down, idle timeout,\n"
      "  lease expired, deadline, command ended, out of memory, agent crashed" + own_end_labels() + ").\n" +
      (default_plane ? "  --remote: the sandboxes gpubox started that a control plane runs: --backend's (default " + (*default_plane)->name() +
                   "), in --app (the Modal app, or the Kubernetes namespace: --namespace too).\n"
             : std::string());
  auto args = parse_args(raw, {"--app", "--namespace", "--backend"}, {"--remote"});
  if (!args) return fail_usage("ls", args.status());
  if (args->flag("--help")) return show_usage(kUsage.c_str());
  if (!args->positional.empty()) return fail_usage("ls", "unexpected argument '" + args->positional[0] + "'");
  auto store = SandboxStore::open_default();
  if (!store) return fail("ls", store.status(), kExitUsage);
  if (args->flag("--remote")) return list_remote(*args, global, *store);
  auto records = store->list();
  std::vector<SandboxRecord*> pointers;
  for (auto& record : records) pointers.push_back(&record);
  // Each backend with a control plane is asked about its own records (one call for all of them).
  for (const auto& [plane, refreshed] : refresh_sandbox_states(*store, pointers)) {
    std::fprintf(stderr, "gpubox ls: %s's states could not be read: %s\n", plane.c_str(),
                 escape_for_terminal(refreshed.message(), true).c_str());
  }
  if (global.json || args->flag("--json")) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& record : records) list.push_back(summary(record));
    std::cout << list.dump() << "\n";
    return kExitOk;
  }
  std::printf("%-12s  %-20s  %-22s  %-7s  %s\n", "ID", "NAME", "STATE", "BACKEND", "CREATED");
  for (const auto& record : records) {
    // Read back from records that a sandbox's end (its exit record) and its user's names went into.
    std::printf("%-12s  %-20s  %-22s  %-7s  %s\n", escape_for_terminal(record.id).c_str(),
                record.name.empty() ? "-" : escape_for_terminal(record.name).c_str(),
                escape_for_terminal(state_text(summary(record))).c_str(), escape_for_terminal(record.backend).c_str(),
                age(record.created_at).c_str());
  }
  return kExitOk;
}

int run_info(const std::vector<std::string>& raw, const Global& global) {
  constexpr char kUsage[] = "usage: gpubox info ID|NAME [--json]\n";
  auto args = parse_args(raw, {}, {});
  if (!args) return fail_usage("info", args.status());
  if (args->flag("--help")) return show_usage(kUsage);
  if (args->positional.size() != 1) return fail_usage("info", "expected one sandbox id or name");
  auto record = find_sandbox_with_state("info", args->positional[0]);
  if (!record) return fail("info", record.status(), exit_code_for(record.status()));

  nlohmann::json info = summary(*record);
  info["spec"] = record->spec;
  info["spec"].erase("limit_plan");
  info["isolation"] = record->spec.value("isolation", nlohmann::json(nullptr));
  info["spec"].erase("isolation");
  LimitPlan plan = LimitPlan::from_json(record->spec.value("limit_plan", nlohmann::json::object()));
  if (long long used = memory_usage_bytes(plan); used >= 0) info["memory_used_bytes"] = used;
  if (long long kills = oom_kill_count(plan); kills >= 0) info["oom_kills"] = kills;
  info["cgroups"] = plan.cgroup_dirs;
  int code = kExitOk;
  std::string agent_error;
  if (sandbox_state(*record) == "running") {
    auto client = connect_sandbox(*record);
    Result<nlohmann::json> agent = client ? (*client)->call("sys.info") : Result<nlohmann::json>(client.status());
    if (agent) {
      info["agent"] = *agent;
      // Usage is extra: an agent that cannot tell it still gives its info.
      auto usage = sandbox_usage(**client);
      if (usage) info["usage"] = *usage;
      else info["usage_error"] = usage.status().to_string();
    } else {
      agent_error = agent.status().to_string();
      info["agent_error"] = agent_error;
      code = kExitUnreachable;
    }
  }
  if (global.json || args->flag("--json")) {
    std::cout << info.dump() << "\n";
    return code;
  }
  const auto& spec = record->spec;
  // Everything below is read from the record or the agent's answer: nothing in it acts on the terminal.
  auto text = [](const nlohmann::json& value) {
    return escape_for_terminal(value.is_string() ? value.get<std::string>() : value.dump());
  };
  std::printf("id:          %s\n", escape_for_terminal(record->id).c_str());
  std::printf("name:        %s\n", record->name.empty() ? "-" : escape_for_terminal(record->name).c_str());
  std::printf("backend:     %s\n", escape_for_terminal(record->backend).c_str());
  std::printf("state:       %s\n", escape_for_terminal(state_text(info)).c_str());
  if (info.contains("ended")) std::printf("ended:       %s\n", escape_for_terminal(info["ended"].value("message", "")).c_str());
  std::printf("created:     %s\n", age(record->created_at).c_str());
  std::printf("endpoint:    %s\n", escape_for_terminal(record->endpoint).c_str());
  if (const Backend* backend = find_backend(record->backend)) {
    for (const auto& [label, line] : backend->describe(*record, info)) {
      std::printf("%-12s %s\n", escape_for_terminal(label).c_str(), escape_for_terminal(line).c_str());
    }
  }
  auto enforced = spec.value("limits_enforced_by", nlohmann::json::object());
  auto limit_line = [&](const char* label, const char* key, const std::string& value) {
    std::printf("%-12s %s  (%s)\n", label, value.c_str(), text(enforced.value(key, nlohmann::json("?"))).c_str());
  };
  double cpu = spec.value("cpu", 0.0);
  auto memory = spec.value("memory_mib", 0ULL), pids = spec.value("pids", 0ULL);
  limit_line("cpu:", "cpu", cpu > 0 ? std::to_string(cpu).substr(0, std::to_string(cpu).find('.') + 3) : "unlimited");
  limit_line("memory:", "memory", memory ? std::to_string(memory) + " MiB" : "unlimited");
  limit_line("pids:", "pids", pids ? std::to_string(pids) : "unlimited");
  if (info.contains("memory_used_bytes")) {
    std::printf("memory used: %.1f MiB\n", static_cast<double>(info["memory_used_bytes"].get<long long>()) / 1048576.0);
  }
  std::printf("timeout:     %s\n", spec.value("timeout_s", 0.0) > 0 ? (text(spec["timeout_s"]) + " s").c_str() : "none");
  std::printf("idle timeout: %s\n",
              spec.value("idle_timeout_s", 0.0) > 0 ? (text(spec["idle_timeout_s"]) + " s").c_str() : "none");
  std::printf("env:         %s\n", text(spec.value("env", nlohmann::json::array())).c_str());
  std::printf("secrets:     %s (values are not stored on the host)\n",
              text(spec.value("secrets", nlohmann::json::array())).c_str());
  for (const auto& mount : spec.value("mounts", nlohmann::json::array())) {
    std::printf("mount:       %s -> %s%s\n", text(mount["source"]).c_str(), text(mount["target"]).c_str(),
                mount.value("read_only", false) ? " (ro)" : "");
  }
  if (info.contains("agent")) {
    const auto& agent = info["agent"];
    std::printf("agent:       %s, protocol %s, up %.1f s\n", text(agent.value("agent_version", nlohmann::json("?"))).c_str(),
                text(agent.value("protocol_version", nlohmann::json("?"))).c_str(), agent.value("uptime_s", 0.0));
  } else if (!agent_error.empty()) {
    std::printf("agent:       not answering: %s\n", escape_for_terminal(agent_error).c_str());
  }
  if (info.contains("usage")) {
    std::printf("usage:       (gpubox usage %s)\n", escape_for_terminal(record->id).c_str());
    print_requested(requested_resources(*record));
    print_usage_table(info["usage"]);
  }
  return code;
}

int run_logs(const std::vector<std::string>& raw, const Global& global) {
  constexpr char kUsage[] =
      "usage: gpubox logs ID|NAME [-f|--follow]              the agent's log\n"
      "       gpubox logs ID|NAME JOB [--stderr] [-f|--follow]  a job's stdout (or stderr)\n";
  auto args = parse_args(raw, {}, {"-f", "--follow", "--stderr"});
  if (!args) return fail_usage("logs", args.status());
  if (args->flag("--help")) return show_usage(kUsage);
  if (args->positional.size() == 2) return run_job_logs(*args, global);
  if (args->flag("--stderr")) return fail_usage("logs", "--stderr needs a JOB");
  if (args->positional.size() != 1) return fail_usage("logs", "expected a sandbox id or name, and optionally a JOB");
  auto record = find_sandbox(args->positional[0]);
  if (!record) return fail("logs", record.status(), exit_code_for(record.status()));
  bool follow = args->flag("-f") || args->flag("--follow");
  auto backend = backend_of(*record);
  if (!backend) return fail("logs", backend.status(), kExitUsage);
  switch ((*backend)->agent_log_source(*record)) {
    case AgentLogSource::through_agent:
      return print_remote_agent_log(*record, follow);  // the log is inside the sandbox
    case AgentLogSource::engine: {
      std::vector<std::string> command = (*backend)->engine_log_command(*record, follow);
      auto ran = run_program_into_stdout(command[0], {command.begin() + 1, command.end()});
      if (!ran) return fail("logs", ran.status(), kExitFailed);
      return *ran == 0 ? kExitOk : kExitFailed;
    }
    case AgentLogSource::host_file:
      break;
  }
  // Never through a link, never a FIFO (host/agent_files.h): a file planted in
  // the agent's place is refused, naming it.
  const std::string dir = record->agent_files_dir();
  auto log = open_agent_file(dir, "agent.log");
  if (!log && (log.status().code() != ErrorCode::not_found || !follow)) {
    return fail("logs", log.status().code() == ErrorCode::not_found ? "no log yet at '" + dir + "/agent.log'" : log.status().message(),
                kExitFailed);
  }
  Fd in = log ? std::move(*log) : Fd();
  // Copies what the log holds beyond what was copied already.
  auto drain = [&] {
    if (!in.valid()) {
      auto opened = open_agent_file(dir, "agent.log");
      if (opened) in = std::move(*opened);
    }
    char buffer[65536];
    ssize_t got;
    while (in.valid() && ((got = ::read(in.get(), buffer, sizeof buffer)) > 0 || (got < 0 && errno == EINTR))) {
      if (got > 0) std::fwrite(buffer, 1, static_cast<size_t>(got), stdout);
    }
    std::fflush(stdout);
  };
  drain();
  if (!follow) return kExitOk;
  while (sandbox_state(*record) == "running") {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    drain();
  }
  drain();  // the agent's last lines, written as it exited
  return kExitOk;
}

}  // namespace gpubox::host::cli
