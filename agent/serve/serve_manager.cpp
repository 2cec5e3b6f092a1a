#include "agent/serve/serve_manager.h"
#include "base/thread_annotations.h"

#include <sys/stat.h>

#include <cerrno>

namespace gpubox::serve {

using nlohmann::json;

namespace {

bool valid_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') return false;
  }
  return name != "." && name != "..";
}

}  // namespace

ServeManager::ServeManager(ServeSettings settings, ProcessLauncher& launcher)
    : settings_(std::move(settings)), launcher_(launcher) {}

ServeManager::~ServeManager() { stop_all(); }

std::shared_ptr<Service> ServeManager::find(const std::string& name) const {
  MutexLock lock(mutex_);
  auto it = services_.find(name);
  return it == services_.end() ? nullptr : it->second;
}

Result<json> ServeManager::start(const rpc::CallContext& call) {
  const json& params = call.params();
  std::string name = params.value("name", "");
  if (!params.contains("name") || !params["name"].is_string() || !valid_name(name)) {
    return Status(ErrorCode::invalid_request, "name: expected 1 to 64 letters, digits, '_', '-' or '.'");
  }
  if (!params.contains("path") || !params["path"].is_string() || params["path"].get<std::string>().empty() ||
      params["path"].get<std::string>()[0] != '/') {
    return Status(ErrorCode::invalid_request, "path: expected the absolute path of a Python file in the sandbox");
  }
  std::string path = params["path"].get<std::string>();
  int restart_limit = settings_.default_restart_limit;
  if (params.contains("restart_limit")) {
    const json& limit = params["restart_limit"];
    if (!limit.is_number_integer() || limit.get<long long>() < 0 || limit.get<long long>() > 1000) {
      return Status(ErrorCode::invalid_request, "restart_limit: expected an integer from 0 to 1000");
    }
    restart_limit = limit.get<int>();
  }
  struct stat info{};
  if (::stat(path.c_str(), &info) != 0) return Status::from_errno(errno, "path '" + path + "'");
  if (!S_ISREG(info.st_mode)) return Status(ErrorCode::invalid_request, "path '" + path + "': not a regular file");

  ServiceOptions options;
  options.name = name;
  options.path = path;
  options.restart_limit = restart_limit;
  options.python = settings_.python;
  options.env = settings_.env;
  options.cwd = settings_.cwd;
  options.sys_path = settings_.sys_path;
  options.models = settings_.models;
  std::shared_ptr<Service> service;
  {
    MutexLock lock(mutex_);
    if (stopping_) return Status(ErrorCode::unavailable, "the agent is shutting down");
    if (services_.count(name)) {
      return Status(ErrorCode::already_exists, "a service named '" + name + "' runs already; serve.stop it first");
    }
    options.fd_watch = fd_watch_;
    service = std::make_shared<Service>(std::move(options), launcher_);
    services_[name] = service;
    service->start();  // under the lock: stop_all() either stops it or it never starts
  }
  Status loaded = service->wait_first_load(call);
  if (!loaded) {
    {
      MutexLock lock(mutex_);
      auto it = services_.find(name);
      if (it != services_.end() && it->second == service) services_.erase(it);
    }
    service->stop();
    return loaded;
  }
  json entry = service->describe();
  return json{{"name", name}, {"functions", entry["functions"]}};
}

Status ServeManager::stop(const std::string& name) {
  std::shared_ptr<Service> service;
  {
    MutexLock lock(mutex_);
    auto it = services_.find(name);
    if (it == services_.end()) return Status(ErrorCode::not_found, "no service named '" + name + "'; serve.list lists them");
    service = it->second;
    services_.erase(it);
  }
  service->stop();
  return Status::ok();
}

json ServeManager::list() const {
  std::vector<std::shared_ptr<Service>> services;
  {
    MutexLock lock(mutex_);
    for (const auto& [name, service] : services_) services.push_back(service);
  }
  json out = json::array();
  for (const auto& service : services) out.push_back(service->describe());
  return json{{"services", out}};
}

Result<json> ServeManager::call(rpc::CallContext& call) {
  std::string name = call.params()["service"].get<std::string>();
  auto service = find(name);
  if (!service) return Status(ErrorCode::not_found, "no service named '" + name + "'; serve.list lists them");
  return service->call(call);
}

bool ServeManager::take_call(const std::shared_ptr<rpc::CallContext>& call) {
  auto service = find(call->params()["service"].get<std::string>());
  return service && service->take_call(call);
}

void ServeManager::use_fd_watch(rpc::FdWatch* watch) {
  MutexLock lock(mutex_);
  fd_watch_ = watch;
}

Result<json> ServeManager::logs(const std::string& name, std::size_t tail_bytes) const {
  auto service = find(name);
  if (!service) return Status(ErrorCode::not_found, "no service named '" + name + "'; serve.list lists them");
  return service->logs(tail_bytes);
}

void ServeManager::begin_stop() {
  MutexLock lock(mutex_);
  stopping_ = true;
  for (auto& [name, service] : services_) service->begin_stop();
}

void ServeManager::stop_all() {
  std::map<std::string, std::shared_ptr<Service>> services;
  {
    MutexLock lock(mutex_);
    stopping_ = true;
    services.swap(services_);
  }
  for (auto& [name, service] : services) service->stop();
}

}  // namespace gpubox::serve
