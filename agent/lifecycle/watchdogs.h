// Watchdogs: the sandbox's lifetime limits (docs/architecture.md, "Lifecycle of a
// sandbox", steps 3, 4 and 7), measured on the agent's own monotonic clock
// from its start: the harvest watchdog (one harvest margin before the
// container deadline), the container deadline itself, the idle watchdog (no
// RPC and no job for idle_timeout) and the owner lease (no sys.heartbeat for
// lease). Timers run on the event-loop thread; note_activity() and
// heartbeat() may be called from any thread.
#pragma once

#include <atomic>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "agent/config.h"
#include "agent/timers.h"

namespace gpubox {

enum class WatchdogShutdown { idle, lease, container_deadline };
std::string watchdog_shutdown_name(WatchdogShutdown reason);

struct WatchdogActions {
  std::function<void()> harvest;                    // stop and stage every job
  std::function<void(WatchdogShutdown)> shutdown;   // shut the agent down
  std::function<bool()> busy;                       // true while a job is queued, running or staging
};

class Watchdogs {
 public:
  // Anchors the clock at timers.now(): call as the agent starts.
  Watchdogs(Timers& timers, const LifecycleConfig& config, WatchdogActions actions);
  Watchdogs(const Watchdogs&) = delete;
  Watchdogs& operator=(const Watchdogs&) = delete;

  // Arms the timers (event-loop thread).
  void start();
  // An RPC arrived or a job started or ended. Any thread.
  void note_activity();
  // sys.heartbeat: renews the lease. Any thread. Returns describe().
  nlohmann::json heartbeat();
  // {"lease_s", "lease_expires_in_s", "deadline_in_s", "harvest_in_s", "idle_timeout_s"} (nulls where off).
  nlohmann::json describe() const;
  // When the harvest watchdog fires; nullopt without a container deadline.
  std::optional<Timers::Clock::time_point> harvest_at() const;
  std::optional<Timers::Clock::time_point> deadline_at() const;

 private:
  void check_idle();
  void check_lease();
  Timers::Clock::time_point stamp(const std::atomic<Timers::Clock::rep>& ticks) const;

  Timers& timers_;
  const LifecycleConfig config_;
  WatchdogActions actions_;
  const Timers::Clock::time_point started_;
  std::atomic<Timers::Clock::rep> last_activity_;   // since the clock's epoch
  std::atomic<Timers::Clock::rep> last_heartbeat_;
  bool fired_ = false;  // event-loop thread: a shutdown was asked for
};

}  // namespace gpubox
