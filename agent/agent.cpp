// Agent's wiring: constructs the parts of PID 1 (supervisor, jobs and their
// watchdogs, kernel, model host, served interfaces, RPC server and its
// methods) and connects them. The loop that runs them is pid1_loop.cpp.
#include "agent/agent.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>

#include "agent/kernel_launcher.h"
#include "agent/methods/methods.h"
#include "agent/model_mounts.h"
#include "agent/serve/serve_manager.h"
#include "rpc/keys.h"

namespace gpubox {

Agent::Agent(CommandLine options) : options_(std::move(options)), is_pid1_(::getpid() == 1) {}

Agent::~Agent() {
  if (serve_) serve_->stop_all();  // while the server's I/O thread, which reads the workers, still runs
  server_.reset();
  serve_.reset();
  modeld_.reset();
  kernel_.reset();
  jobs_.reset();
}

namespace {

Result<std::string> read_secret_key(const RpcConfig& rpc) {
  if (!rpc.secret_key.empty() || rpc.secret_key_file.empty()) return rpc.secret_key;
  std::ifstream in(rpc.secret_key_file);
  std::string key;
  if (!in || !std::getline(in, key)) {
    return Status(ErrorCode::not_found, "cannot read rpc.secret_key_file '" + rpc.secret_key_file + "'");
  }
  while (!key.empty() && (key.back() == '\r' || key.back() == ' ')) key.pop_back();
  if (!rpc::is_z85_key(key)) {
    return Status(ErrorCode::invalid_request, "rpc.secret_key_file '" + rpc.secret_key_file + "': expected a 40-character Z85 key");
  }
  return key;
}

// The agent log's line for each preloaded model after every (re)load; a hidden
// model is named by its variable only (user code can read the log file).
void log_model_report(const nlohmann::json& models) {
  for (const auto& model : models) {
    std::string var = model.value("var_name", "");
    std::string name = model.value("hidden", false) ? std::string("(hidden)") : model.value("name", "");
    if (model.value("status", "") == "loaded") {
      log::info("model loaded", {{"var_name", var}, {"model", name}, {"type", model.value("type", "")},
                                 {"device", model.value("device", "")}, {"parameters", model.value("parameters", 0LL)}});
    } else {
      log::error("model failed to load", {{"var_name", var}, {"model", name}, {"error", model.value("error", "")}});
    }
  }
}

}  // namespace

std::vector<std::pair<std::string, std::string>> Agent::child_env() const {
  std::vector<std::pair<std::string, std::string>> env(options_.config.env.begin(), options_.config.env.end());
  env.insert(env.end(), options_.config.secrets.begin(), options_.config.secrets.end());
  return env;
}

// IPython, matplotlib and jedi keep their caches and config under HOME. When HOME
// is the work dir (the local backend sets HOME=/workspace) or unset, they would
// land among the user's files: the kernel gets a home of its own in the state dir.
std::vector<std::pair<std::string, std::string>> Agent::kernel_env() const {
  auto env = child_env();
  for (const auto& [name, value] : env) {
    if (name == "HOME") return env;  // the config names a home: it is the user's choice
  }
  const char* home = std::getenv("HOME");
  char cwd[4096];
  bool home_is_work_dir = home && ::getcwd(cwd, sizeof cwd) && std::string(cwd) == home;
  if (home && *home && !home_is_work_dir) return env;
  std::string kernel_home = options_.config.state_dir + "/kernel-home";
  if (::mkdir(kernel_home.c_str(), 0700) != 0 && errno != EEXIST) {
    log::warn("cannot create the kernel's home", {{"path", kernel_home}, {"error", std::strerror(errno)}});
    return env;
  }
  env.emplace_back("HOME", kernel_home);
  return env;
}

std::string Agent::local_endpoint() const {
  const RpcConfig& rpc = options_.config.rpc;
  if (rpc.endpoints.empty()) return "";
  for (const auto& endpoint : rpc.endpoints) {
    if (endpoint.rfind("ipc://", 0) == 0) return endpoint;
  }
  return options_.config.model_host.enabled ? "ipc://" + options_.config.state_dir + "/rpc.sock" : "";
}

void Agent::start_modeld() {
  if (!options_.config.model_host.enabled) return;
  ModeldSupervisorOptions options;
  options.config = options_.config.model_host;
  options.state_dir = options_.config.state_dir;
  options.own_mount_namespace = is_pid1_;
  options.stop_grace = options_.config.shutdown_grace;
  options.env = child_env();
  options.remove_env = {"GPUBOX_CONFIG"};
  modeld_ = std::make_unique<ModeldSupervisor>(processes_, *loop_, std::move(options));
  modeld_->start();
}

std::string Agent::kernel_connection_file() const {
  const KernelConfig& config = options_.config.kernel;
  return config.connection_file.empty() ? options_.config.state_dir + "/kernel.json" : config.connection_file;
}

void Agent::start_kernel() {
  const KernelConfig& config = options_.config.kernel;
  if (!config.enabled) return;
  kernel::AgentKernelOptions options;
  options.executor.python = config.python;
  options.executor.mode = config.mode;
  // Setup order: the gpubox package, the workspace on sys.path, the models, then the custom init code (which may use all).
  options.executor.setup_code.push_back(kernel::python_package_setup_code());
  if (!config.workspace_dir.empty()) options.executor.setup_code.push_back(kernel::workspace_setup_code(config.workspace_dir));
  std::vector<kernel::ModelLoad> models = place_models(config.models, options_.config.state_dir, is_pid1_);
  for (const auto& model : models) {
    if (!model.error.empty()) continue;
    model_paths_[model.spec.name] = model.load_path;
    if (!model.spec.var_name.empty()) model_paths_[model.spec.var_name] = model.load_path;
  }
  if (!models.empty()) {
    options.executor.setup_code.push_back(kernel::models_setup_code(models));
    options.models = kernel::pending_model_report(models);
    options.on_model_report = log_model_report;
  }
  options.executor.setup_code.insert(options.executor.setup_code.end(), config.setup_code.begin(), config.setup_code.end());
  auto env = kernel_env();
  // The Python client in a cell connects here (gpubox.Client() with no endpoint) to reach model.* and the rest.
  if (std::string endpoint = local_endpoint(); !endpoint.empty()) env.emplace_back("GPUBOX_ENDPOINT", endpoint);
  options.executor.env = build_environment(env, {"GPUBOX_CONFIG"});
  options.connection_file = kernel_connection_file();
  options.preload = config.preload || !models.empty();  // models load with the agent, not at the first cell
  auto started = kernel::AgentKernel::start(std::move(options), make_table_launcher(processes_));
  if (!started) {
    kernel_error_ = started.status().message();
    log::error("kernel could not start", {{"error", kernel_error_}});
    return;
  }
  kernel_ = std::move(*started);
  log::info("kernel listening", {{"ports", kernel_->endpoints().dump()}});
}

void Agent::start_serve() {
  const KernelConfig& kernel = options_.config.kernel;
  serve::ServeSettings settings;
  settings.python = kernel.python;
  auto env = kernel_env();
  if (std::string endpoint = local_endpoint(); !endpoint.empty()) env.emplace_back("GPUBOX_ENDPOINT", endpoint);
  settings.env = build_environment(env, {"GPUBOX_CONFIG"});
  if (!kernel.workspace_dir.empty()) settings.sys_path.push_back(kernel.workspace_dir);
  settings.models = model_paths_;
  // The model host's models by their configured path; a hidden one's path is never handed out.
  for (const auto& model : options_.config.model_host.models) {
    if (!model.hidden && !settings.models.contains(model.name)) settings.models[model.name] = model.path;
  }
  serve_ = std::make_unique<serve::ServeManager>(std::move(settings), processes_);
}

Status Agent::start_rpc() {
  const RpcConfig& rpc = options_.config.rpc;
  if (rpc.endpoints.empty()) return Status::ok();
  AgentAccess access;
  access.request_shutdown = [this] { loop_->post([this] { begin_shutdown("shutdown", "sys.shutdown"); }); };
  access.components = [this] { return components(); };
  auto seconds = [](std::chrono::milliseconds ms) { return static_cast<double>(ms.count()) / 1000.0; };
  access.seccomp = {{"profile", options_.config.seccomp.enabled ? "default" : "unconfined"},
                    {"denied", seccomp_denied_calls(options_.config.seccomp)}};
  access.lifecycle = {{"timeout_s", seconds(options_.config.lifecycle.timeout)},
                      {"idle_timeout_s", seconds(options_.config.lifecycle.idle_timeout)}};
  access.accepting_work = [this] { return accepting_work_.load(); };
  access.child_env = child_env();
  access.model_host = [this] { return modeld_ ? modeld_->info() : nlohmann::json{{"state", "off"}}; };
  access.job_usage = [this] { return jobs_->usage(); };

  rpc::ServerOptions server;
  server.endpoints = rpc.endpoints;
  if (std::string local = local_endpoint();
      !local.empty() && std::find(server.endpoints.begin(), server.endpoints.end(), local) == server.endpoints.end()) {
    server.endpoints.push_back(local);
  }
  // The host's own endpoint, in a directory no other process of the sandbox
  // can reach: nothing there can replace or answer it (docs/security.md).
  if (options_.host_dir_fd >= 0) server.endpoints.push_back("ipc://" + host_files_dir() + "/rpc.sock");
  auto secret = read_secret_key(rpc);
  if (!secret) return secret.status();
  server.secret_key = *secret;
  server.authorized = std::make_shared<rpc::AuthorizedKeys>(rpc.authorized_keys, rpc.authorized_keys_file);
  server.limits.max_in_flight = static_cast<std::size_t>(rpc.max_in_flight);
  server.limits.max_body_bytes = static_cast<std::size_t>(rpc.max_body_bytes);
  server.limits.max_message_bytes = static_cast<std::size_t>(rpc.max_message_bytes);
  server.max_workers = static_cast<std::size_t>(rpc.max_workers);

  add_sys_methods(methods_, access, server.limits);
  add_proc_methods(methods_, processes_, access);
  add_fs_methods(methods_);
  add_job_methods(methods_, *jobs_, access);
  add_lifecycle_methods(methods_, *watchdogs_);
  add_kernel_methods(methods_, [this] { return kernel_.get(); }, options_.config.kernel.execute_timeout);
  add_kernel_relay_method(methods_, [this] { return kernel_.get(); }, kernel_connection_file());
  add_modeld_forwarders(methods_, modeld_.get());
  start_serve();
  add_serve_methods(methods_, *serve_, access);
  server.on_activity = [this] { watchdogs_->note_activity(); };
  auto started = rpc::Server::start(std::move(server), methods_);
  if (!started) return started.status();
  server_ = std::move(*started);
  serve_->use_fd_watch(server_.get());
  std::string endpoints;
  for (const auto& endpoint : server_->endpoints()) endpoints += (endpoints.empty() ? "" : " ") + endpoint;
  log::info("rpc listening", {{"endpoints", endpoints}, {"public_key", server_->public_key()}});
  return Status::ok();
}

nlohmann::json Agent::components() {
  // The supervisor belongs to the loop thread: ask it there.
  auto promise = std::make_shared<std::promise<nlohmann::json>>();
  auto answer = promise->get_future();
  loop_->post([this, promise] {
    nlohmann::json children = nlohmann::json::object();
    for (const auto& child : supervisor_->list()) {
      nlohmann::json entry = {{"state", child_state_name(child.state)}, {"restarts", child.restarts}};
      if (child.pid) entry["pid"] = child.pid;
      if (child.last_exit) entry["last_exit"] = child.last_exit->describe();
      if (!child.last_error.empty()) entry["last_error"] = child.last_error;
      children[child.name] = std::move(entry);
    }
    nlohmann::json kernel = kernel_                               ? kernel_->status()
                            : !options_.config.kernel.enabled ? nlohmann::json{{"state", "disabled"}}
                                                              : nlohmann::json{{"state", "failed"}, {"error", kernel_error_}};
    promise->set_value(nlohmann::json{{"rpc", {{"state", "ready"}}},
                                      {"kernel", std::move(kernel)},
                                      {"shutdown", {{"state", stopping_ ? "stopping" : "running"}}},
                                      {"children", std::move(children)}});
  });
  if (answer.wait_for(std::chrono::seconds(2)) != std::future_status::ready) {
    return nlohmann::json{{"rpc", {{"state", "ready"}}}, {"children", {{"state", "unknown: the agent's loop is busy"}}}};
  }
  return answer.get();
}

Status Agent::start_jobs() {
  const Config& config = options_.config;
  WatchdogActions actions;
  actions.harvest = [this] {
    jobs_->stop_all(jobs::StopReason::container_deadline,
                    "the container deadline is one harvest margin away (harvest watchdog); no new jobs start");
  };
  actions.shutdown = [this](WatchdogShutdown reason) { on_watchdog(reason); };
  actions.busy = [this] { return jobs_->busy() || (kernel_ && kernel_->in_use()); };
  watchdogs_ = std::make_unique<Watchdogs>(*loop_, config.lifecycle, std::move(actions));

  jobs::JobsHost host;
  host.launcher = &processes_;
  host.post = [this](std::function<void()> fn) { loop_->post(std::move(fn)); };
  host.timers = loop_.get();
  host.child_env = child_env();
  host.harvest_at = watchdogs_->harvest_at();
  host.on_activity = [this] { watchdogs_->note_activity(); };
  auto manager = jobs::JobManager::create(config.jobs, config.state_dir, std::move(host));
  if (!manager) return manager.status();
  jobs_ = std::move(*manager);
  return Status::ok();
}

int Agent::wire_parts() {
  const Config& config = options_.config;
  supervisor_ = std::make_unique<Supervisor>(processes_, *loop_, config.shutdown_grace, child_env(),
                                             std::vector<std::string>{"GPUBOX_CONFIG"});
  supervisor_->on_change([](const ChildInfo& child) {
    log::debug("child state", {{"child", child.name}, {"state", child_state_name(child.state)}});
  });

  log::info("agent starting", {{"pid", static_cast<int>(::getpid())},
                               {"mode", is_pid1_ ? "pid1" : "subreaper"},
                               {"state_dir", config.state_dir},
                               {"children", static_cast<int>(config.children.size())}});
  if (Status jobs = start_jobs(); !jobs) {
    std::fprintf(stderr, "gpubox-agent: cannot start jobs: %s\n", jobs.message().c_str());
    log::error("jobs could not start", {{"error", jobs.message()}});
    log::flush();
    return kExitNoStart;
  }
  start_kernel();
  start_modeld();
  if (Status rpc = start_rpc(); !rpc) {
    std::fprintf(stderr, "gpubox-agent: cannot start RPC: %s\n", rpc.message().c_str());
    log::error("rpc could not start", {{"error", rpc.message()}});
    log::flush();
    return kExitNoStart;
  }
  return kExitClean;
}

}  // namespace gpubox
