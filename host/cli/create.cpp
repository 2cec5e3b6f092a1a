// `gpubox create`: a new sandbox, printed by id (or as JSON).
#include <sys/stat.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>
#include <thread>

#include "host/backends/create_flags.h"
#include "host/backends/registry.h"
#include "host/budget/sandbox_budget.h"
#include "base/terminal_text.h"
#include "host/cli/cli.h"
#include "host/cli/create_usage.h"
#include "host/snapshot.h"
#include "host/sandboxes/state.h"
#include "host/sandboxes/terminate.h"

namespace gpubox::host::cli {
namespace {

// The agent reads what create built from --config FILE and the flags through a
// descriptor, and names it so in a refusal: name what the user gave instead.
std::string in_create_words(std::string message, const nlohmann::json& pub) {
  const std::string agent_label = "config (--config-fd): ";
  auto at = message.find(agent_label);
  if (at == std::string::npos) return message;
  std::string given = pub.contains("config_file") ? "--config " + pub["config_file"].get<std::string>() + " with the flags"
                                                  : "the flags";
  return message.replace(at, agent_label.size(), "config (" + given + "): ");
}

// How long create waits for the model host to say how each model's load began.
constexpr std::chrono::seconds kModelStartWait{60};
// A model host restarted this often before its models began loading is failing, not starting.
constexpr int kStartRestarts = 3;

// The configured models as the sandbox's model host reports them once each
// load has begun (its size known), is ready, or has failed: an error naming
// the first that failed, or the model host itself failing. Models still
// loading are fine. Gives up quietly after kModelStartWait. hint: the backend's, for a model that failed.
Status check_models_began(const SandboxRecord& record, const std::string& hint) {
  auto client = connect_sandbox(record);
  if (!client) return client.status();
  auto give_up = std::chrono::steady_clock::now() + kModelStartWait;
  while (std::chrono::steady_clock::now() < give_up) {
    auto info = (*client)->call("sys.info");
    if (!info) return info.status();
    const auto& host = info->value("model_host", nlohmann::json::object());
    auto text = [&](const char* key) {  // last_exit is null before the first exit
      auto it = host.find(key);
      return it != host.end() && it->is_string() ? it->get<std::string>() : std::string("?");
    };
    if (text("state") == "failed") return Status(ErrorCode::unavailable, "the model host failed: " + text("error"));
    if (text("state") == "restarting" && host.value("restarts", 0) >= kStartRestarts) {
      return Status(ErrorCode::unavailable, "the model host keeps exiting as it starts (" +
                                                std::to_string(host.value("restarts", 0)) + " restarts; last exit: " + text("last_exit") + ")");
    }
    bool all_began = text("state") == "running";
    for (const auto& model : host.value("models", nlohmann::json::array())) {
      std::string state = model.value("state", "");
      if (state == "failed") {
        return Status(ErrorCode::unavailable, "model '" + model.value("name", "?") + "' failed to load: " +
                                                  model.value("error", "no reason given") + hint);
      }
      all_began = all_began && (state == "ready" || model.value("bytes_total", 0.0) > 0);
    }
    if (all_began) return Status::ok();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return Status::ok();
}

// Does the agent config name models for the model host?
bool spec_has_models(const nlohmann::json& config) {
  auto host = config.find("model_host");
  if (host == config.end() || !host->is_object()) return false;
  auto models = host->find("models");
  return models != host->end() && models->is_array() && !models->empty();
}

bool valid_env_name(const std::string& name) {
  static const std::regex kName("[A-Za-z_][A-Za-z0-9_]*");
  return std::regex_match(name, kName);
}

}  // namespace

int create_sandbox(const std::vector<std::string>& raw, const Global& global, const Snapshot* from) {
  auto usage = [](const std::string& message) { return fail_usage("create", message); };
  // The common flags, then those the backends define (Backend::own_flags).
  std::set<std::string> with_value = {"--backend", "--config", "--name", "--cpu", "--memory", "--pids", "--timeout",
                                      "--idle-timeout", "--network", "--env", "--secret", "--mount", "--gpu", "--seccomp", "--budget"};
  std::set<std::string> switches = {"--userns", "--models-optional"};
  for (const BackendFlag& flag : backend_flags(all_backends())) (flag.takes_value ? with_value : switches).insert(flag.name);
  auto parsed = parse_args(raw, with_value, switches);
  if (!parsed) return usage(parsed.status().message());
  if (parsed->flag("--help")) return show_usage(create_usage(all_backends()).c_str());
  const Args& args = *parsed;
  bool json = global.json || args.flag("--json");
  if (!args.positional.empty() || args.has_double_dash) return usage("unexpected argument '" + (args.positional.empty() ? "--" : args.positional[0]) + "'");

  auto found = backend_named(args.last("--backend").value_or("local"));
  if (!found) return usage("--backend: " + found.status().message());
  const Backend& backend = **found;
  if (from && backend.name() != from->backend) {
    return usage("--from-snapshot " + from->name + ": a " + from->backend + " snapshot makes a " + from->backend + " sandbox");
  }
  // The flags only some backends take: this one's checked, the others' refused.
  if (Status flags = backend.check_flags(args); !flags) return usage(flags.message());
  if (Status foreign = refuse_foreign_flags(args, backend, all_backends()); !foreign) return usage(foreign.message());

  CreateRequest spec;
  spec.flags = &args;
  spec.from = from;
  spec.agent_path = default_agent_path();
  spec.name = args.last("--name").value_or("");
  nlohmann::json& config = spec.agent_config;
  nlohmann::json& pub = spec.public_spec;
  if (auto file = args.last("--config")) {
    std::ifstream in(*file);
    if (!in) return usage("--config: cannot read '" + *file + "': " + std::strerror(errno));
    config = nlohmann::json::parse(in, nullptr, false);
    if (!config.is_object()) return usage("--config: '" + *file + "' is not a JSON object");
    char resolved[PATH_MAX];
    pub["config_file"] = ::realpath(file->c_str(), resolved) ? resolved : *file;
  }
  // The flags extend the document's objects; a document whose field is of the
  // wrong type is refused here rather than silently replaced.
  for (const char* key : {"env", "secrets", "lifecycle", "shutdown", "rpc", "log"}) {
    if (!config.contains(key)) {
      if (std::string(key) == "env" || std::string(key) == "secrets") config[key] = nlohmann::json::object();
    } else if (!config[key].is_object()) {
      return usage(std::string("--config: ") + key + ": expected an object");
    }
  }

  if (auto cpu = args.last("--cpu")) {
    auto value = parse_number(*cpu, 0.01, 1024);
    if (!value) return usage("--cpu: expected a number of CPUs from 0.01 to 1024, got '" + *cpu + "'");
    spec.limits.cpus = *value;
  }
  if (auto memory = args.last("--memory")) {
    auto value = parse_number(*memory, 4, 1 << 24);
    if (!value || *value != static_cast<double>(static_cast<std::uint64_t>(*value))) {
      return usage("--memory: expected whole MiB from 4 to 16777216, got '" + *memory + "'");
    }
    spec.limits.memory_mib = static_cast<std::uint64_t>(*value);
  }
  std::string pids = args.last("--pids").value_or("4096");
  auto pids_value = parse_number(pids, 8, 4194304);
  if (!pids_value || *pids_value != static_cast<double>(static_cast<std::uint64_t>(*pids_value))) {
    return usage("--pids: expected a whole number from 8 to 4194304, got '" + pids + "'");
  }
  spec.limits.pids = static_cast<std::uint64_t>(*pids_value);
  for (const char* flag : {"--timeout", "--idle-timeout"}) {
    if (auto text = args.last(flag)) {
      auto value = parse_number(*text, 0, 604800);
      if (!value) return usage(std::string(flag) + ": expected seconds from 0 to 604800, got '" + *text + "'");
      config["lifecycle"][flag == std::string("--timeout") ? "timeout_seconds" : "idle_timeout_seconds"] = *value;
    }
  }
  std::string network = args.last("--network").value_or("none");
  spec.network = network;
  spec.user_namespace = args.flag("--userns");
  std::string seccomp = args.last("--seccomp").value_or("default");
  if (seccomp != "default" && seccomp != "unconfined") return usage("--seccomp: expected default or unconfined, got '" + seccomp + "'");
  spec.seccomp_unconfined = seccomp == "unconfined";

  std::vector<std::string> env_names;
  for (const auto& pair : args.all("--env")) {
    auto eq = pair.find('=');
    std::string name = pair.substr(0, eq);
    if (eq == std::string::npos || !valid_env_name(name)) {
      return usage("--env: expected NAME=VALUE with NAME of [A-Za-z_][A-Za-z0-9_]*, got '" + pair + "'");
    }
    config["env"][name] = pair.substr(eq + 1);
  }
  for (const auto& [name, value] : config["env"].items()) env_names.push_back(name);
  std::vector<std::string> secret_names;
  for (const auto& name : args.all("--secret")) {
    if (!valid_env_name(name)) return usage("--secret: '" + name + "' is not a variable name");
    const char* value = std::getenv(name.c_str());
    if (!value) return usage("--secret " + name + ": not set in this environment (export it first)");
    config["secrets"][name] = value;
  }
  for (const auto& [name, value] : config["secrets"].items()) secret_names.push_back(name);

  nlohmann::json mounts = nlohmann::json::array();
  for (const auto& text : args.all("--mount")) {
    std::vector<std::string> parts;
    std::stringstream stream(text);
    for (std::string part; std::getline(stream, part, ':');) parts.push_back(part);
    bool ro = parts.size() == 3 && parts[2] == "ro";
    if (parts.size() < 2 || parts.size() > 3 || (parts.size() == 3 && !ro && parts[2] != "rw") || parts[1].empty() ||
        parts[1][0] != '/') {
      return usage("--mount: expected LOCAL:SANDBOX[:ro] with SANDBOX absolute, got '" + text + "'");
    }
    char resolved[PATH_MAX];
    if (!::realpath(parts[0].c_str(), resolved)) {
      return usage("--mount: cannot use '" + parts[0] + "': " + std::strerror(errno));
    }
    auto under = [&](const std::string& dir) { return parts[1] == dir || parts[1].rfind(dir + "/", 0) == 0; };
    if (parts[1] == "/" || under("/proc") || under(kSandboxStateDir)) {
      return usage("--mount: the sandbox path '" + parts[1] + "' is reserved");
    }
    spec.mounts.push_back({resolved, parts[1], ro});
    mounts.push_back({{"source", resolved}, {"target", parts[1]}, {"read_only", ro}});
  }

  // What only this backend refuses: its networks, --gpu, --userns, reserved paths, timeouts.
  if (Status checked = backend.check_create(spec); !checked) return usage(checked.message());

  pub["network"] = network;
  pub["userns"] = spec.user_namespace;
  pub["seccomp"] = seccomp;
  pub["gpus"] = nlohmann::json::array();  // the local backend's host GPU numbers
  pub["cpu"] = spec.limits.cpus;
  pub["memory_mib"] = spec.limits.memory_mib;
  pub["pids"] = spec.limits.pids;
  pub["timeout_s"] = config.contains("lifecycle") ? config["lifecycle"].value("timeout_seconds", 0.0) : 0.0;
  pub["idle_timeout_s"] = config.contains("lifecycle") ? config["lifecycle"].value("idle_timeout_seconds", 0.0) : 0.0;
  double grace = 10;
  if (config.contains("shutdown") && config["shutdown"].is_object() && config["shutdown"].contains("grace_seconds") &&
      config["shutdown"]["grace_seconds"].is_number()) {
    grace = config["shutdown"]["grace_seconds"].get<double>();
  }
  pub["grace_s"] = grace;
  pub["env"] = env_names;
  pub["secrets"] = secret_names;
  pub["mounts"] = mounts;

  // What a snapshot needs to recreate the sandbox: its config, less the secrets.
  pub["agent_config"] = config;
  pub["agent_config"].erase("secrets");
  if (pub["agent_config"].contains("rpc")) pub["agent_config"]["rpc"].erase("secret_key");

  auto store = SandboxStore::open_default();
  if (!store) return usage(store.status().message());
  // The budget holds the cost first, fsynced; past its ceiling nothing is dispatched.
  nlohmann::json budget_entry;
  auto reserved = budget::reserve_for_create(*store, backend, spec, args.last("--budget").value_or(""), from != nullptr,
                                             &budget_entry);
  if (!reserved) return fail_budget("create", reserved.status());
  if (*reserved) pub["budget"] = budget_entry;
  auto created = backend.create(*store, spec);
  std::string held = *reserved ? budget::finish_create(*store, backend, **reserved, created) : "";
  if (!created) {
    std::string message = in_create_words(created.status().message(), pub);
    return fail("create", Status(created.status().code(), message + held), exit_code_for(created.status()));
  }
  if (*reserved && !json) {
    std::fprintf(stderr, "gpubox create: budget %s holds %s for it (reservation %s)\n", escape_for_terminal((*reserved)->budget).c_str(),
                 budget::usd_text((*reserved)->micro_usd).c_str(), escape_for_terminal((*reserved)->id).c_str());
  }
  if (from) {
    if (Status restored = backend.restore_snapshot_files(*from, *created); !restored) {
      (void)terminate_sandbox(*store, *created, std::chrono::seconds(1));
      return fail("create", "--from-snapshot " + from->name + ": " + restored.message(), kExitFailed);
    }
    std::fprintf(stderr, "gpubox create: restored snapshot %s of %s: its files%s and settings; processes that ran then are not running\n",
                 escape_for_terminal(from->name).c_str(), escape_for_terminal(from->source_id).c_str(), backend.snapshot_keeps_packages(*from) ? ", installed packages" : "");
  }
  bool has_models = spec_has_models(pub["agent_config"]);
  if (has_models && !args.flag("--models-optional")) {
    if (Status models = check_models_began(*created, backend.model_failure_hint()); !models) {
      (void)terminate_sandbox(*store, *created, std::chrono::seconds(2));
      return fail("create", models.message() + "; the sandbox was ended (--models-optional keeps it)", kExitFailed);
    }
  }
  if (json) {
    nlohmann::json shown = {{"id", created->id}, {"name", created->name}, {"backend", created->backend},
                            {"endpoint", created->endpoint}, {"state", sandbox_state(*created)}};
    if (*reserved) {
      shown["budget"] = {{"name", (*reserved)->budget}, {"reservation", (*reserved)->id},
                         {"reserved_usd", static_cast<double>((*reserved)->micro_usd) / 1e6},
                         {"reserved_gpu_hours", static_cast<double>((*reserved)->micro_gpu_h) / 1e6}};
    }
    std::cout << shown.dump() << "\n";
  } else {
    std::cout << created->id << "\n";
  }
  return kExitOk;
}

int run_create(const std::vector<std::string>& raw, const Global& global) {
  for (const auto& arg : raw) {
    if (arg == "--") break;
    if (arg == "--from-snapshot" || arg.rfind("--from-snapshot=", 0) == 0) return run_create_from_snapshot(raw, global);
  }
  return create_sandbox(raw, global, nullptr);
}

}  // namespace gpubox::host::cli
