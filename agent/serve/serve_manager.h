// ServeManager: the agent's served interfaces by name (serve.* methods):
// starts, lists, calls and stops Services. Thread-safe; RPC handler threads
// call it, the agent's shutdown stops it.
#pragma once

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "agent/process_table.h"
#include "agent/serve/service.h"
#include "base/thread_annotations.h"
#include "rpc/call.h"

namespace gpubox::serve {

// What every worker gets, from the agent's config.
struct ServeSettings {
  std::string python = "python3";      // kernel.python
  std::vector<std::string> env;        // the whole environment
  std::string cwd;                     // empty: the agent's
  std::vector<std::string> sys_path;   // kernel.workspace_dir when set
  nlohmann::json models = nlohmann::json::object();  // get_model_path: name → path
  int default_restart_limit = 5;
};

class ServeManager {
 public:
  ServeManager(ServeSettings settings, ProcessLauncher& launcher);
  ServeManager(const ServeManager&) = delete;
  ServeManager& operator=(const ServeManager&) = delete;
  ~ServeManager();

  // serve.start: {name, functions} once the interface imported.
  Result<nlohmann::json> start(const rpc::CallContext& call);
  Status stop(const std::string& name);
  nlohmann::json list() const;
  Result<nlohmann::json> call(rpc::CallContext& call);
  // serve.call's fast path (Service::take_call), on the RPC I/O thread.
  bool take_call(const std::shared_ptr<rpc::CallContext>& call);
  // Services started from now on use watch (the RPC server's I/O thread),
  // which must outlive stop_all().
  void use_fd_watch(rpc::FdWatch* watch);
  Result<nlohmann::json> logs(const std::string& name, std::size_t tail_bytes) const;
  // The agent shuts down: no worker restarts from now on.
  void begin_stop();
  void stop_all();

 private:
  std::shared_ptr<Service> find(const std::string& name) const;

  const ServeSettings settings_;
  ProcessLauncher& launcher_;
  mutable Mutex mutex_;
  std::map<std::string, std::shared_ptr<Service>> services_ GUARDED_BY(mutex_);
  bool stopping_ GUARDED_BY(mutex_) = false;
  rpc::FdWatch* fd_watch_ GUARDED_BY(mutex_) = nullptr;
};

}  // namespace gpubox::serve
