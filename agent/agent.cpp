#include "agent/agent.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <future>
#include <set>

#include "agent/kernel_launcher.h"
#include "agent/methods/methods.h"
#include "agent/model_mounts.h"
#include "agent/serve/serve_manager.h"
#include "rpc/keys.h"

#include "agent/signals.h"

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

void Agent::on_watchdog(WatchdogShutdown reason) {
  jobs::StopReason job_reason = reason == WatchdogShutdown::idle    ? jobs::StopReason::idle
                                : reason == WatchdogShutdown::lease ? jobs::StopReason::lease
                                                                    : jobs::StopReason::container_deadline;
  const char* end = reason == WatchdogShutdown::idle    ? "idle_timeout"
                    : reason == WatchdogShutdown::lease ? "lease_expired"
                                                        : "deadline";
  begin_shutdown(end, "watchdog: " + watchdog_shutdown_name(reason), job_reason, true);
}

std::string Agent::host_files_dir() const {
  return options_.host_dir_fd >= 0 ? "/proc/self/fd/" + std::to_string(options_.host_dir_fd) : options_.config.state_dir;
}

Status Agent::open_state_dir() {
  std::error_code error;
  std::filesystem::create_directories(options_.config.state_dir, error);
  if (error) {
    return Status(ErrorCode::permission_denied,
                  "cannot create state_dir '" + options_.config.state_dir + "': " + error.message());
  }
  ::chmod(options_.config.state_dir.c_str(), 0700);
  log::Options log_options;
  log_options.level = options_.config.log_level;
  log_options.to_stderr = options_.config.log_stderr;
  if (options_.config.log_file) log_options.file = host_files_dir() + "/agent.log";
  std::string log_error;
  if (!log::configure(log_options, &log_error)) {
    return Status(ErrorCode::permission_denied, "cannot open the log file: " + log_error);
  }
  return Status::ok();
}

Status Agent::filter_children() {
  const SeccompSettings& seccomp = options_.config.seccomp;
  if (!seccomp.enabled) {
    log::warn("seccomp: unconfined; the processes the agent starts have no syscall filter");
    return Status::ok();
  }
  auto program = build_seccomp_program(seccomp);
  if (!program) return program.status();
  log::info("seccomp: the processes the agent starts are filtered",
            {{"instructions", static_cast<int>(program->instructions.size())}, {"namespaces_allowed", seccomp.allow_namespaces}});
  return processes_.set_child_filter(*program);
}

void Agent::shield_from_oom_killer() {
  // -1000 needs CAP_SYS_RESOURCE, which containers often lack; raising the
  // children's score needs nothing and makes them the choice all the same.
  int fd = ::open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  bool shielded = fd >= 0 && ::write(fd, "-1000", 5) == 5;
  if (fd >= 0) ::close(fd);
  int children = shielded ? 0 : 500;
  processes_.set_children_oom_score_adj(children);
  log::info("oom killer", {{"agent_oom_score_adj", shielded ? -1000 : 0}, {"children_oom_score_adj", children}});
}

int Agent::run() {
  // Not PID 1: become the child subreaper, so orphans of our children are ours to reap.
  if (!is_pid1_) ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  // PID 1 must never be the OOM killer's choice in a memory-limited sandbox:
  // its death ends the sandbox and every output not yet harvested.
  if (is_pid1_) shield_from_oom_killer();
  // The ready fd is ours alone: children must not inherit it and keep the pipe open.
  if (options_.ready_fd >= 0) ::fcntl(options_.ready_fd, F_SETFD, FD_CLOEXEC);
  // So is the host's directory: a child holding it could replace what the host reads.
  if (options_.host_dir_fd >= 0) ::fcntl(options_.host_dir_fd, F_SETFD, FD_CLOEXEC);

  Status started = open_state_dir();
  if (started) started = filter_children();
  auto loop = EventLoop::create();
  auto signal_fd = open_signal_fd();
  if (started && !loop) started = loop.status();
  if (started && !signal_fd) started = signal_fd.status();
  if (!started) {
    std::fprintf(stderr, "gpubox-agent: cannot start: %s\n", started.message().c_str());
    return kExitNoStart;
  }
  loop_ = std::move(*loop);
  signal_fd_ = std::move(*signal_fd);
  Status watched = loop_->add_fd(signal_fd_.get(), [this] { handle_signals(); });
  if (!watched) {
    std::fprintf(stderr, "gpubox-agent: cannot start: %s\n", watched.message().c_str());
    return kExitNoStart;
  }

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
  if (!options_.command.empty()) {
    Status main_started = start_main_command();
    if (!main_started) {
      std::fprintf(stderr, "gpubox-agent: %s\n", main_started.message().c_str());
      log::error("main command could not start", {{"error", main_started.message()}});
      log::flush();
      return main_started.code() == ErrorCode::not_found ? kExitNotFound : kExitNotExecutable;
    }
  }
  for (const auto& child : config.children) {
    (void)supervisor_->add(child);
    (void)supervisor_->start(child.name);
  }
  watchdogs_->start();
  signal_ready();
  loop_->run();
  if (serve_) serve_->stop_all();  // while the server's I/O thread, which reads the workers, still runs
  server_.reset();  // answers calls still in flight before the process table goes
  modeld_.reset();
  jobs_.reset();

  log::info("agent exiting", {{"exit_code", exit_code_}, {"killed_after_grace", killed_}});
  log::flush();
  write_exit_record();
  return exit_code_;
}

void Agent::write_exit_record() const {
  nlohmann::json record = {{"reason", end_reason_}, {"detail", end_detail_}, {"exit_code", exit_code_},
                           {"ended_at", static_cast<double>(::time(nullptr))}};
  std::string path = host_files_dir() + "/exit.json";
  std::string temp = path + ".tmp";
  {
    std::ofstream out(temp, std::ios::trunc);
    out << record.dump() << "\n";
    if (!out.flush()) return;
  }
  ::rename(temp.c_str(), path.c_str());
}

Status Agent::start_main_command() {
  SpawnOptions spawn;
  spawn.argv = options_.command;
  spawn.env = build_environment(child_env(), {"GPUBOX_CONFIG"});
  auto pid = processes_.spawn(spawn, [this](pid_t, ExitStatus status) {
    main_exit_ = status;
    main_pid_ = 0;
    exit_code_ = status.shell_code();
    log::info("main command ended", {{"status", status.describe()}});
    begin_shutdown("main_command_ended", "main command ended: " + status.describe());
  });
  if (!pid) return pid.status();
  main_pid_ = *pid;
  // Give the command the terminal, as a shell would, so ^C and ^Z reach it.
  if (::isatty(STDIN_FILENO)) ::tcsetpgrp(STDIN_FILENO, main_pid_);
  log::info("main command started", {{"pid", static_cast<int>(main_pid_)}, {"argv0", options_.command[0]}});
  return Status::ok();
}

void Agent::signal_ready() {
  log::info("agent ready");
  if (options_.ready_fd < 0) return;
  static const char kReady[] = "ready\n";
  [[maybe_unused]] auto written = ::write(options_.ready_fd, kReady, sizeof kReady - 1);
  ::close(options_.ready_fd);
  options_.ready_fd = -1;
}

void Agent::handle_signals() {
  while (int sig = read_signal(signal_fd_.get())) {
    switch (signal_action(sig, main_pid_ > 0)) {
      case SignalAction::reap:
        reap();
        break;
      case SignalAction::shutdown:
        if (stopping_) {
          log::warn("second shutdown signal: skipping the rest of the grace", {{"signal", signal_name(sig)}});
          kill_everything();
        } else {
          begin_shutdown("terminated", "signal " + signal_name(sig));
        }
        break;
      case SignalAction::forward:
        forward(sig);
        break;
      case SignalAction::ignore:
        break;
    }
  }
}

void Agent::forward(int sig) {
  log::info("forwarding signal", {{"signal", signal_name(sig)}});
  if (main_pid_ > 0) {
    if (!processes_.signal_group(main_pid_, sig)) ::kill(main_pid_, sig);
    return;
  }
  for (const auto& child : supervisor_->list()) {
    if (child.pid > 0) processes_.signal_group(child.pid, sig);
  }
}

void Agent::reap() {
  processes_.reap();
  finish_if_done();
}

void Agent::begin_shutdown(std::string_view end, std::string_view reason, jobs::StopReason job_reason, bool persist) {
  if (stopping_) return;
  stopping_ = true;
  end_reason_ = end;
  end_detail_ = reason;
  accepting_work_ = false;
  log::info("shutting down", {{"reason", reason}, {"grace_ms", static_cast<long long>(options_.config.shutdown_grace.count())}});
  // Jobs first, so their results name why they were stopped; staging holds
  // the exit back until every job is staged (finish_if_done).
  jobs_->begin_shutdown(job_reason, persist ? options_.config.lifecycle.persistent_dir : "", [this] { finish_if_done(); });
  // Scheduled before stop_all() arms the supervisor's own kill timers (same
  // grace, due a moment later), so this one fires first and a KILL after the
  // grace is always counted in the exit status.
  grace_timer_ = loop_->schedule(options_.config.shutdown_grace, [this] {
    grace_timer_ = 0;
    kill_everything();
  });
  supervisor_->stop_all([] {});
  if (modeld_) modeld_->begin_stop();
  // Before the TERM below reaches the executor, so that it is not restarted.
  if (kernel_) kernel_->begin_stop();
  if (serve_) serve_->begin_stop();
  if (main_pid_ > 0) processes_.signal_group(main_pid_, SIGTERM);
  // Processes started over RPC (proc.exec, proc.spawn) are neither main nor supervised.
  std::set<pid_t> supervised;
  for (const auto& child : supervisor_->list()) supervised.insert(child.pid);
  if (modeld_) supervised.insert(modeld_->pid());
  for (pid_t pid : processes_.live_pids()) {
    if (pid != main_pid_ && !supervised.count(pid)) processes_.signal_group(pid, SIGTERM);
  }
  // As PID 1, orphans reparented to the agent (a command's `setsid x &`) are
  // in no group it knows: -1 reaches every process of the namespace.
  if (is_pid1_) ::kill(-1, SIGTERM);
  finish_if_done();
}

void Agent::kill_everything() {
  if (grace_timer_) loop_->cancel(grace_timer_);
  grace_timer_ = 0;
  processes_.reap();
  bool anything_left = is_pid1_ ? processes_.has_children() : !processes_.live_pids().empty();
  if (!anything_left) {
    finish_if_done();
    return;
  }
  killed_ = true;
  log::warn("killing what is left", {{"processes", static_cast<int>(processes_.live_pids().size())}});
  supervisor_->kill_all();
  for (pid_t pid : processes_.live_pids()) {
    processes_.signal_group(pid, SIGKILL);
    ::kill(pid, SIGKILL);
  }
  // As PID 1 of a namespace, -1 means every process in it, orphans included.
  if (is_pid1_) ::kill(-1, SIGKILL);
  finish_if_done();
}

void Agent::finish_if_done() {
  if (!stopping_) return;
  processes_.reap();
  // As PID 1, wait for every process of the namespace; as a subreaper, for ours.
  bool done = is_pid1_ ? !processes_.has_children() : processes_.live_pids().empty();
  if (!done || !jobs_->shut_down()) return;
  if (grace_timer_) loop_->cancel(grace_timer_);
  grace_timer_ = 0;
  if (!main_exit_) exit_code_ = killed_ ? kExitKilled : kExitClean;
  loop_->stop();
}

}  // namespace gpubox
