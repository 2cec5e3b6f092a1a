// create_sandbox, list_sandboxes, terminate_sandbox, show_budget. create (and show_budget) run this very
// binary's `gpubox --json create` as a child (its checks and messages are
// the CLI's; its namespaces and forks stay out of this threaded server);
// list and terminate use the sandbox store and the backends' interface
// (host/backends/backend.h), as the CLI's own commands do.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "host/backends/backend.h"
#include "host/kernelspecs.h"
#include "host/mcp/tools.h"
#include "host/sandbox_end.h"
#include "host/sandboxes/state.h"
#include "host/sandboxes/terminate.h"

extern char** environ;

namespace gpubox::mcp {
namespace {

// A finished child: its exit code and everything it wrote to stdout.
struct Captured {
  int exit_code = -1;
  std::string out;
};

// Runs argv with stdin from /dev/null, stdout captured and stderr ours (the log).
Result<Captured> run_capture(const std::vector<std::string>& argv) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return Status::from_errno(errno, "pipe");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  std::vector<char*> args;
  for (const auto& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  int spawned = ::posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  if (spawned != 0) {
    ::close(pipe_fds[0]);
    return Status::from_errno(spawned, "cannot run '" + argv[0] + "'");
  }
  Captured captured;
  char buffer[4096];
  while (true) {
    ssize_t n = ::read(pipe_fds[0], buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    captured.out.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(pipe_fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  captured.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return captured;
}

std::string number_text(const json& value) {
  if (value.is_number_integer()) return std::to_string(value.get<long long>());
  char text[64];
  std::snprintf(text, sizeof text, "%.17g", value.get<double>());
  return text;
}

// The CLI's flags in a create's refusal, as create_sandbox's arguments name them.
std::string in_argument_words(std::string text) {
  const std::pair<const char*, const char*> words[] = {
      {"; the sandbox was ended (--models-optional keeps it)", "; the sandbox was ended (models_optional: true keeps it)"},
      {"must be mounted: --mount HOST:SANDBOX[:ro]", "must be mounted: mounts [{\"host\", \"sandbox\", \"read_only\"?}]"},
      {"--mount", "mounts"}, {"--idle-timeout", "idle_timeout"}, {"--timeout", "timeout"}, {"--memory", "memory"},
      {"--cpu", "cpu"}, {"--gpu", "gpu"}, {"--network", "network"}, {"--budget", "budget"}, {"--name", "name"},
      {"--env", "env"}, {"--config", "config"}};
  for (const auto& [from, to] : words) {
    for (auto at = text.find(from); at != std::string::npos; at = text.find(from, at + std::strlen(to))) {
      text.replace(at, std::strlen(from), to);
    }
  }
  return text;
}

// models (the model host's, as model_host.models) into the config; both at once is refused, naming them.
Status add_models(const json& args, json& config) {
  if (!args.contains("models")) return Status::ok();
  if (config.contains("model_host") && config["model_host"].is_object() && config["model_host"].contains("models")) {
    return Status::invalid_request("models: give the model host's models here or in config.model_host.models, not both");
  }
  if (!config.contains("model_host") || !config["model_host"].is_object()) config["model_host"] = json::object();
  config["model_host"]["models"] = args["models"];
  return Status::ok();
}

ToolResult create(ToolEnv& env, const json& args) {
  std::vector<std::string> argv = {env.cli_path, "--json", "create"};
  json config = args.value("config", json::object());
  if (Status models = add_models(args, config); !models) return ToolResult::from(models);
  const json mounts = args.value("mounts", json::array());
  for (std::size_t i = 0; i < mounts.size(); ++i) {
    const json& mount = mounts[i];
    std::string where = "mounts[" + std::to_string(i) + "]";
    if (mount["sandbox"].get<std::string>().rfind('/', 0) != 0) {
      return ToolResult::from(Status::invalid_request(where + ".sandbox: expected an absolute path in the sandbox"));
    }
    if ((mount["host"].get<std::string>() + mount["sandbox"].get<std::string>()).find(':') != std::string::npos) {
      return ToolResult::from(Status::invalid_request(where + ": a path with ':' cannot be mounted"));
    }
    argv.insert(argv.end(), {"--mount", mount["host"].get<std::string>() + ":" + mount["sandbox"].get<std::string>() +
                                            (mount.value("read_only", false) ? ":ro" : "")});
  }
  if (args.value("models_optional", false)) argv.push_back("--models-optional");
  if (args.contains("name")) argv.insert(argv.end(), {"--name", args["name"].get<std::string>()});
  if (args.contains("cpu")) argv.insert(argv.end(), {"--cpu", number_text(args["cpu"])});
  if (args.contains("memory")) argv.insert(argv.end(), {"--memory", number_text(args["memory"])});
  if (args.contains("timeout")) argv.insert(argv.end(), {"--timeout", number_text(args["timeout"])});
  if (args.contains("idle_timeout")) argv.insert(argv.end(), {"--idle-timeout", number_text(args["idle_timeout"])});
  if (args.contains("gpu")) argv.insert(argv.end(), {"--gpu", args["gpu"].get<std::string>()});
  if (args.contains("network")) argv.insert(argv.end(), {"--network", args["network"].get<std::string>()});
  if (args.contains("budget")) argv.insert(argv.end(), {"--budget", args["budget"].get<std::string>()});
  if (args.contains("env")) {
    for (const auto& [name, value] : args["env"].items()) argv.insert(argv.end(), {"--env", name + "=" + value.get<std::string>()});
  }
  std::string config_file;
  if (!config.empty()) {
    char path[] = "/tmp/gpubox-mcp-config-XXXXXX";
    int fd = ::mkstemp(path);
    if (fd < 0) return ToolResult::from(Status::from_errno(errno, "cannot write the config"));
    std::string text = config.dump();
    bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    ::close(fd);
    config_file = path;
    if (!written) {
      ::unlink(path);
      return ToolResult::error("cannot write the config");
    }
    argv.insert(argv.end(), {"--config", config_file});
  }
  auto ran = run_capture(argv);
  if (!config_file.empty()) ::unlink(config_file.c_str());
  if (!ran) return ToolResult::from(ran.status());
  json out = json::parse(ran->out, nullptr, false);
  if (ran->exit_code != 0 || !out.is_object() || !out.contains("id")) {
    std::string message = out.is_object() && out.contains("error") ? out["error"].value("message", ran->out) : ran->out;
    // The CLI's code too: budget_exceeded says that nothing was created and why, as the CLI says it.
    std::string code = out.is_object() && out.contains("error") ? out["error"].value("code", "failed") : "failed";
    return ToolResult::error("create_sandbox failed: " + in_argument_words(message), {{"exit_code", ran->exit_code}, {"code", code}});
  }
  ToolResult result;
  result.structured = {{"sandbox_id", out["id"]}, {"name", out.value("name", "")}, {"backend", out.value("backend", "local")},
                       {"state", out.value("state", "")}};
  return result;
}

// `gpubox --json budget`: each budget's ceiling, reserved, settled and left, and the open reservations.
ToolResult show_budget(ToolEnv& env) {
  auto ran = run_capture({env.cli_path, "--json", "budget"});
  if (!ran) return ToolResult::from(ran.status());
  json out = json::parse(ran->out, nullptr, false);
  if (ran->exit_code != 0 || !out.is_object() || !out.contains("budgets")) {
    std::string message = out.is_object() && out.contains("error") ? out["error"].value("message", ran->out) : ran->out;
    return ToolResult::error("show_budget failed: " + message, {{"exit_code", ran->exit_code}});
  }
  ToolResult result;
  result.structured = out;
  return result;
}

json summary(const host::SandboxRecord& record) {
  json entry = {{"sandbox_id", record.id}, {"name", record.name}, {"backend", record.backend},
                {"state", sandbox_state(record)}, {"created_at", record.created_at}};
  if (entry["state"] == "dead") entry["ended"] = host::sandbox_end(record).message;
  return entry;
}

ToolResult list() {
  auto store = host::SandboxStore::open_default();
  if (!store) return ToolResult::from(store.status());
  json sandboxes = json::array();
  for (const auto& record : store->list()) sandboxes.push_back(summary(record));
  ToolResult result;
  result.structured = {{"sandboxes", sandboxes}};
  return result;
}

ToolResult terminate(ToolEnv& env, const json& args) {
  auto record = env.sandboxes.resolve(args);
  if (!record) return ToolResult::from(record.status());
  auto store = host::SandboxStore::open_default();
  if (!store) return ToolResult::from(store.status());
  std::string was = sandbox_state(*record);
  env.sandboxes.forget(record->id);
  auto grace = std::chrono::milliseconds(static_cast<long long>(record->spec.value("grace_s", 10.0) * 1000));
  bool killed = false;
  Status stopped = host::terminate_sandbox(*store, *record, grace, &killed);
  if (!stopped) return ToolResult::from(stopped);
  std::vector<std::string> kernelspecs = host::remove_sandbox_kernelspecs(record->id);
  ToolResult result;
  result.structured = {{"sandbox_id", record->id}, {"name", record->name}, {"was", was}, {"terminated", true},
                       {"killed", killed}, {"kernelspecs_removed", kernelspecs}};
  return result;
}

}  // namespace

void add_sandbox_tools(ToolRegistry& tools, ToolEnv& env) {
  tools.add({"create_sandbox",
             "Create a new local gpubox sandbox (the agent as PID 1, a Jupyter kernel, jobs, and with models a model host "
             "whose models run_model and generate use). Returns its sandbox_id.",
             tool_schema({{"name", {{"type", "string"}, {"description", "a unique name to refer to it by"}}},
                          {"cpu", {{"type", "number"}, {"minimum", 0.01}, {"description", "CPUs"}}},
                          {"memory", {{"type", "integer"}, {"minimum", 4}, {"description", "memory limit in MiB"}}},
                          {"timeout", {{"type", "number"}, {"minimum", 0}, {"description", "container lifetime in seconds"}}},
                          {"idle_timeout", {{"type", "number"}, {"minimum", 0}, {"description", "end it after this long unused"}}},
                          {"env", {{"type", "object"}, {"additionalProperties", {{"type", "string"}}}}},
                          {"gpu", {{"type", "string"}, {"description", "all, or GPU numbers N[,N...]"}}},
                          {"network", {{"type", "string"}, {"enum", {"none", "host"}}}},
                          {"budget", {{"type", "string"}, {"description", "the budget that holds its cost first (default: the "
                                                                           "default budget; none: no budget); past its ceiling "
                                                                           "nothing is created (show_budget)"}}},
                          {"config", {{"type", "object"}, {"description", "an agent config document (docs/config.md)"}}},
                          {"mounts", {{"type", "array"},
                                      {"items", {{"type", "object"},
                                                 {"properties", {{"host", {{"type", "string"}}},
                                                                 {"sandbox", {{"type", "string"}}},
                                                                 {"read_only", {{"type", "boolean"}}}}},
                                                 {"required", {"host", "sandbox"}},
                                                 {"additionalProperties", false}}},
                                      {"description", "host directories or files the sandbox sees at an absolute "
                                                      "sandbox path (a local sandbox sees neither this host's /tmp "
                                                      "nor /var/tmp)"}}},
                          {"models", {{"type", "array"},
                                      {"items", {{"type", "object"},
                                                 {"properties", {{"name", {{"type", "string"}}},
                                                                 {"path", {{"type", "string"}}},
                                                                 {"dtype", {{"type", "string"}}},
                                                                 {"device", {{"type", "string"}}},
                                                                 {"hidden", {{"type", "boolean"}}},
                                                                 {"cuda_graphs", {{"type", "boolean"}}},
                                                                 {"tensor_parallel", {{"type", "integer"}}},
                                                                 {"allow_cpu_split", {{"type", "boolean"}}},
                                                                 {"max_batch", {{"type", "integer"}}},
                                                                 {"max_queue", {{"type", "integer"}}},
                                                                 {"kv_cache_mb", {{"type", "integer"}}},
                                                                 {"saes", {{"type", "array"}, {"items", {{"type", "object"}}}}}}},
                                                 {"required", {"name", "path"}},
                                                 {"additionalProperties", false}}},
                                      {"description", "models for the sandbox's model host (docs/config.md "
                                                      "model_host.models): name, path (the Hugging Face directory as "
                                                      "the sandbox sees it: mount it), dtype, device (\"cuda:0,1\": split "
                                                      "across those GPUs), tensor_parallel, allow_cpu_split, saes [{name, "
                                                      "path, hook?}], kv_cache_mb...; create waits until each began "
                                                      "loading and fails naming one that cannot load"}}},
                          {"models_optional", {{"type", "boolean"}, {"description", "keep the sandbox when a model fails to load"}}}},
                         {}, false)},
            [&env](const json& args, ToolCallContext&) { return create(env, args); });
  tools.add({"show_budget",
             "Show the cost budgets (docs/budget.md): each one's ceiling, reserved, settled and left, and every open "
             "reservation. A create past a budget's ceiling is refused with budget_exceeded and nothing is started.",
             tool_schema(json::object(), {}, false)},
            [&env](const json&, ToolCallContext&) { return show_budget(env); });
  tools.add({"list_sandboxes", "List gpubox sandboxes with their state.", tool_schema(json::object(), {}, false)},
            [](const json&, ToolCallContext&) { return list(); });
  tools.add({"terminate_sandbox", "Stop a sandbox and remove its state.", tool_schema(json::object())},
            [&env](const json& args, ToolCallContext&) { return terminate(env, args); });
}

}  // namespace gpubox::mcp
