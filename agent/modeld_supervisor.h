// ModeldSupervisor: starts gpubox-modeld (config model_host) in its own process
// group under a Supervisor of its own, writes the modeld.json it loads its
// models from at every start, keeps a snapshot of its state and of
// modeld.status (polled by a ModelStatusPoller), and gives forwarders an fd
// that turns readable when the process they talk to ends. start(),
// begin_stop() and every supervisor callback run on the event-loop thread;
// view(), info(), unavailable() and scrub() may be called from any thread.
#pragma once

#include <sys/types.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "agent/config.h"
#include "agent/event_loop.h"
#include "agent/supervisor.h"
#include "base/fd.h"
#include "base/status.h"
#include "base/thread_annotations.h"

namespace gpubox {

class ModelStatusPoller;

struct ModeldSupervisorOptions {
  ModelHostConfig config;
  std::string state_dir;
  bool own_mount_namespace = false;  // PID 1 of a sandbox: hidden models can be bind-mounted
  std::chrono::milliseconds stop_grace{10'000};
  std::vector<std::pair<std::string, std::string>> env;  // the config's env and secrets
  std::vector<std::string> remove_env;                   // GPUBOX_CONFIG
};

// What a forwarder or sys.info sees of the model host at one moment.
struct ModeldView {
  std::string state;        // "starting", "running", "restarting", "stopping", "failed"
  pid_t pid = 0;
  int restarts = 0;
  std::string last_exit;    // "killed by SIGKILL"; empty before the first exit
  std::string error;        // with "failed": why
  nlohmann::json models = nlohmann::json::array();
  std::string endpoint;     // ipc://STATE_DIR/modeld.sock
  // Readable once the running process has ended; null while none runs.
  std::shared_ptr<const Fd> ended;
};

class ModeldSupervisor {
 public:
  ModeldSupervisor(ProcessLauncher& launcher, EventLoop& loop, ModeldSupervisorOptions options);
  ModeldSupervisor(const ModeldSupervisor&) = delete;
  ModeldSupervisor& operator=(const ModeldSupervisor&) = delete;
  // Stops the status poller; the process itself is stopped by begin_stop().
  ~ModeldSupervisor();

  // Finds the binary, places hidden models, writes modeld.json, starts modeld.
  // A failure is kept in the view (state "failed"), never fatal to the agent.
  void start();
  // TERM to modeld's process group, KILL after the grace; no restart.
  void begin_stop();
  pid_t pid() const;

  ModeldView view() const;
  // sys.info's model_host: {"state", "pid", "restarts", "last_exit", "error", "models"}.
  nlohmann::json info() const;
  // The `unavailable` status a forwarded call gets while no modeld serves.
  Status unavailable(const ModeldView& view) const;
  // text with every path of a hidden model (as configured and as placed) replaced by <hidden>.
  std::string scrub(std::string text) const;
  nlohmann::json scrub(nlohmann::json value) const;

 private:
  static constexpr const char* kChildName = "gpubox-modeld";
  Result<std::string> find_binary() const;
  Status write_models_file(const std::string& path);
  void on_change(const ChildInfo& child);
  // From the poller's thread.
  void on_status(std::uint64_t generation, const nlohmann::json& status);
  void on_unresponsive(std::uint64_t generation);
  // The configured models as "loading" (before modeld answers), plus those that could not be placed.
  nlohmann::json pending_models() const;

  ProcessLauncher& launcher_;
  EventLoop& loop_;
  ModeldSupervisorOptions options_;
  std::string endpoint_;
  Supervisor supervisor_;
  std::vector<std::string> hidden_paths_;  // written once in start(), before any reader
  nlohmann::json unplaced_ = nlohmann::json::array();  // likewise: hidden models that could not be placed
  std::unique_ptr<ModelStatusPoller> poller_;

  mutable Mutex mutex_;
  ChildInfo child_ GUARDED_BY(mutex_);
  std::string error_ GUARDED_BY(mutex_);
  bool stopping_ GUARDED_BY(mutex_) = false;
  std::uint64_t generation_ GUARDED_BY(mutex_) = 0;     // counts processes started
  bool answered_ GUARDED_BY(mutex_) = false;            // the running process has answered modeld.status
  nlohmann::json status_models_ GUARDED_BY(mutex_) = nlohmann::json::array();
  std::shared_ptr<Fd> ended_ GUARDED_BY(mutex_);        // the running process's end fd
};

}  // namespace gpubox
