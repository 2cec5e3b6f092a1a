#include "agent/modeld_supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <set>

#include "agent/log.h"
#include "agent/model_mounts.h"
#include "agent/model_status_poller.h"
#include "base/thread_annotations.h"

namespace gpubox {
namespace {

std::string own_executable_dir() {
  char buffer[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buffer, sizeof buffer - 1);
  if (n <= 0) return "";
  std::string path(buffer, static_cast<std::size_t>(n));
  return path.substr(0, path.rfind('/'));
}

std::string join_names(const nlohmann::json& models, const char* state) {
  std::string names;
  for (const auto& model : models) {
    if (model.value("state", "") != state) continue;
    names += (names.empty() ? "" : ", ") + model.value("name", std::string("?"));
  }
  return names.empty() ? "none" : names;
}

constexpr std::chrono::milliseconds kRestartWindow{300'000};

ChildSpec modeld_spec(const std::string& name, const std::string& binary, const std::string& endpoint,
                      const std::string& models_file) {
  ChildSpec spec;
  spec.name = name;
  spec.argv = {binary, "--endpoint", endpoint, "--config", models_file};
  spec.restart = RestartPolicy::always;
  spec.backoff_initial = std::chrono::milliseconds(200);
  spec.backoff_max = std::chrono::milliseconds(30'000);
  spec.max_restarts = 10;
  spec.restart_window = kRestartWindow;
  return spec;
}

}  // namespace

ModeldSupervisor::ModeldSupervisor(ProcessLauncher& launcher, EventLoop& loop, ModeldSupervisorOptions options)
    : launcher_(launcher),
      loop_(loop),
      options_(std::move(options)),
      endpoint_("ipc://" + options_.state_dir + "/modeld.sock"),
      supervisor_(launcher, loop, options_.stop_grace, options_.env, options_.remove_env) {
  supervisor_.on_change([this](const ChildInfo& child) { on_change(child); });
}

ModeldSupervisor::~ModeldSupervisor() { poller_.reset(); }

Result<std::string> ModeldSupervisor::find_binary() const {
  std::string path = options_.config.binary;
  if (path.empty()) {
    std::string dir = own_executable_dir();
    if (dir.empty()) return Status(ErrorCode::not_found, "gpubox-modeld not found: cannot read /proc/self/exe; set model_host.binary");
    path = dir + "/gpubox-modeld";
  }
  if (::access(path.c_str(), X_OK) != 0) {
    return Status(ErrorCode::not_found, "gpubox-modeld not found: " + path + ": " + std::strerror(errno) +
                                            (options_.config.binary.empty() ? " (expected beside the agent; or set model_host.binary)" : ""));
  }
  return path;
}

Status ModeldSupervisor::write_models_file(const std::string& path) {
  std::vector<kernel::PreloadedModel> specs;
  for (const auto& model : options_.config.models) {
    kernel::PreloadedModel spec;
    spec.name = model.name;
    spec.path = model.path;
    spec.hidden = model.hidden;
    specs.push_back(std::move(spec));
  }
  std::vector<kernel::ModelLoad> placed = place_models(specs, options_.state_dir, options_.own_mount_namespace);
  nlohmann::json models = nlohmann::json::array();
  for (std::size_t i = 0; i < placed.size(); ++i) {
    const HostedModel& model = options_.config.models[i];
    if (model.hidden) hidden_paths_.push_back(model.path);
    if (!placed[i].error.empty()) {
      unplaced_.push_back({{"name", model.name}, {"state", "failed"}, {"error", placed[i].error}});
      continue;
    }
    if (model.hidden) hidden_paths_.push_back(placed[i].load_path);
    models.push_back(hosted_model_entry(model, placed[i].load_path));
  }
  std::string text = nlohmann::json{{"models", std::move(models)}}.dump(2) + "\n";
  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd.valid() || ::fchmod(fd.get(), 0600) != 0 || write_fully(fd.get(), text.data(), text.size()) != 0) {
    return Status::from_errno(errno, "cannot write " + path);
  }
  return Status::ok();
}

void ModeldSupervisor::start() {
  auto fail = [this](const Status& status) {
    MutexLock lock(mutex_);
    error_ = scrub(status.message());
    log::error("model host could not start", {{"error", error_}});
  };
  auto binary = find_binary();
  if (!binary) return fail(binary.status());
  std::string models_file = options_.state_dir + "/modeld.json";
  if (Status written = write_models_file(models_file); !written) return fail(written);
  if (Status added = supervisor_.add(modeld_spec(kChildName, *binary, endpoint_, models_file)); !added) return fail(added);

  ModelStatusPoller::Callbacks callbacks;
  callbacks.target = [this] {
    MutexLock lock(mutex_);
    ModelStatusPoller::Target target;
    if (child_.state != ChildState::running) return target;
    target.generation = generation_;
    target.loading = !answered_ || join_names(status_models_, "loading") != "none";
    return target;
  };
  callbacks.on_status = [this](std::uint64_t generation, const nlohmann::json& status) { on_status(generation, status); };
  callbacks.on_unresponsive = [this](std::uint64_t generation) { on_unresponsive(generation); };
  poller_ = std::make_unique<ModelStatusPoller>(endpoint_, std::move(callbacks));
  log::info("model host starting", {{"binary", *binary}, {"endpoint", endpoint_},
                                    {"models", static_cast<int>(options_.config.models.size())}});
  if (Status started = supervisor_.start(kChildName); !started) fail(started);
}

void ModeldSupervisor::begin_stop() {
  {
    MutexLock lock(mutex_);
    stopping_ = true;
  }
  supervisor_.stop_all([] {});
}

pid_t ModeldSupervisor::pid() const {
  MutexLock lock(mutex_);
  return child_.pid;
}

void ModeldSupervisor::on_change(const ChildInfo& child) {
  bool started = false;
  {
    MutexLock lock(mutex_);
    bool was_running = child_.state == ChildState::running;
    bool is_running = child.state == ChildState::running;
    if (was_running && child.pid != child_.pid && ended_) {
      // Ended and already replaced within one callback: never expected, but the old fd must fire.
      eventfd_write(ended_->get(), 1);
      ended_.reset();
    }
    child_ = child;
    if (!child_.last_error.empty()) child_.last_error = scrub(child_.last_error);
    if (is_running && !was_running) {
      ++generation_;
      answered_ = false;
      status_models_ = nlohmann::json::array();
      ended_ = std::make_shared<Fd>(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
      started = true;
    } else if (!is_running && was_running) {
      // After child_ holds last_exit: a forwarder woken by this fd reads why.
      if (ended_) eventfd_write(ended_->get(), 1);
      ended_.reset();
      answered_ = false;
    }
  }
  if (started && poller_) poller_->poke();
  log::info("model host state", {{"state", child_state_name(child.state)},
                                 {"pid", static_cast<int>(child.pid)},
                                 {"restarts", child.restarts},
                                 {"last_exit", child.last_exit ? child.last_exit->describe() : ""}});
}

void ModeldSupervisor::on_status(std::uint64_t generation, const nlohmann::json& status) {
  MutexLock lock(mutex_);
  if (generation != generation_ || child_.state != ChildState::running) return;
  if (!answered_) log::info("model host ready", {{"pid", static_cast<int>(child_.pid)}});
  answered_ = true;
  nlohmann::json models = status.contains("models") && status["models"].is_array() ? status["models"] : nlohmann::json::array();
  status_models_ = scrub(std::move(models));
}

void ModeldSupervisor::on_unresponsive(std::uint64_t generation) {
  loop_.post([this, generation] {
    pid_t pid = 0;
    {
      MutexLock lock(mutex_);
      if (generation != generation_ || child_.state != ChildState::running) return;
      pid = child_.pid;
    }
    log::error("model host unresponsive: killing it to restart it",
               {{"pid", static_cast<int>(pid)}, {"silent_s", static_cast<int>(ModelStatusPoller::kUnresponsiveAfter.count())}});
    launcher_.signal_group(pid, SIGKILL);
  });
}

nlohmann::json ModeldSupervisor::pending_models() const {
  nlohmann::json models = nlohmann::json::array();
  std::set<std::string> unplaced;
  for (const auto& model : unplaced_) unplaced.insert(model.value("name", ""));
  for (const auto& model : options_.config.models) {
    if (unplaced.count(model.name)) continue;
    models.push_back({{"name", model.name}, {"state", "loading"}, {"bytes_loaded", 0}, {"bytes_total", 0},
                      {"tensors_loaded", 0}, {"tensors_total", 0}});
  }
  return models;
}

ModeldView ModeldSupervisor::view() const {
  MutexLock lock(mutex_);
  ModeldView view;
  view.endpoint = endpoint_;
  view.pid = child_.pid;
  view.restarts = child_.restarts;
  if (child_.last_exit) view.last_exit = child_.last_exit->describe();
  view.ended = ended_;
  if (!error_.empty()) {
    view.state = "failed";
    view.error = error_;
  } else if (stopping_) {
    view.state = "stopping";
  } else {
    switch (child_.state) {
      case ChildState::running:
        view.state = answered_ ? "running" : child_.restarts ? "restarting" : "starting";
        break;
      case ChildState::backoff:
        view.state = "restarting";
        break;
      case ChildState::stopped:
        view.state = "starting";
        break;
      case ChildState::stopping:
        view.state = "stopping";
        break;
      case ChildState::exited:
      case ChildState::failed:
        view.state = "failed";
        view.error = "gpubox-modeld restarted too often (" + std::to_string(child_.restarts) + " times within " +
                     std::to_string(kRestartWindow.count() / 1000) + " s); last exit: " +
                     view.last_exit + (child_.last_error.empty() ? "" : "; " + child_.last_error);
        break;
    }
  }
  view.models = answered_ ? status_models_ : pending_models();
  for (const auto& model : unplaced_) view.models.push_back(model);
  return view;
}

nlohmann::json ModeldSupervisor::info() const {
  ModeldView v = view();
  nlohmann::json info = {{"state", v.state}, {"restarts", v.restarts}, {"models", v.models}};
  info["pid"] = v.pid ? nlohmann::json(static_cast<int>(v.pid)) : nlohmann::json();
  info["last_exit"] = v.last_exit.empty() ? nlohmann::json() : nlohmann::json(v.last_exit);
  if (!v.error.empty()) info["error"] = v.error;
  return info;
}

Status ModeldSupervisor::unavailable(const ModeldView& view) const {
  std::string loading = join_names(view.models, "loading");
  if (view.state == "failed") return Status(ErrorCode::unavailable, "the model host failed: " + view.error);
  if (view.state == "stopping") return Status(ErrorCode::unavailable, "the model host is stopping: the agent is shutting down");
  if (view.state == "restarting") {
    return Status(ErrorCode::unavailable, "the model host is restarting (last exit: " + view.last_exit +
                                              "; models loading: " + loading + "); try again shortly");
  }
  return Status(ErrorCode::unavailable, "the model host is starting (models loading: " + loading + "); try again shortly");
}

std::string ModeldSupervisor::scrub(std::string text) const {
  for (const auto& path : hidden_paths_) {
    if (path.empty()) continue;
    for (std::size_t at = text.find(path); at != std::string::npos; at = text.find(path, at + 8)) {
      text.replace(at, path.size(), "<hidden>");
    }
  }
  return text;
}

nlohmann::json ModeldSupervisor::scrub(nlohmann::json value) const {
  if (hidden_paths_.empty()) return value;
  if (value.is_string()) return scrub(value.get<std::string>());
  if (value.is_structured()) {
    for (auto& item : value) item = scrub(std::move(item));
  }
  return value;
}

}  // namespace gpubox
