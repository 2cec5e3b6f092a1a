#include "agent/lifecycle/watchdogs.h"

#include "agent/log.h"

namespace gpubox {
namespace {

using Clock = Timers::Clock;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

std::string watchdog_shutdown_name(WatchdogShutdown reason) {
  switch (reason) {
    case WatchdogShutdown::idle: return "idle";
    case WatchdogShutdown::lease: return "lease";
    case WatchdogShutdown::container_deadline: return "container_deadline";
  }
  return "idle";
}

Watchdogs::Watchdogs(Timers& timers, const LifecycleConfig& config, WatchdogActions actions)
    : timers_(timers),
      config_(config),
      actions_(std::move(actions)),
      started_(timers.now()),
      last_activity_(started_.time_since_epoch().count()),
      last_heartbeat_(started_.time_since_epoch().count()) {}

Clock::time_point Watchdogs::stamp(const std::atomic<Clock::rep>& ticks) const {
  return Clock::time_point(Clock::duration(ticks.load()));
}

std::optional<Clock::time_point> Watchdogs::deadline_at() const {
  if (config_.timeout.count() <= 0) return std::nullopt;
  return started_ + config_.timeout;
}

std::optional<Clock::time_point> Watchdogs::harvest_at() const {
  auto deadline = deadline_at();
  if (!deadline) return std::nullopt;
  auto at = *deadline - config_.harvest_margin;
  return at < started_ ? started_ : at;
}

void Watchdogs::start() {
  if (auto harvest = harvest_at()) {
    timers_.schedule(*harvest - timers_.now(), [this] {
      log::warn("harvest watchdog: the container deadline is one harvest margin away; stopping every job",
                {{"margin_s", seconds(config_.harvest_margin)}});
      if (actions_.harvest) actions_.harvest();
    });
    timers_.schedule(*deadline_at() - timers_.now(), [this] {
      if (fired_) return;
      fired_ = true;
      log::warn("container deadline reached: shutting down", {{"timeout_s", seconds(config_.timeout)}});
      actions_.shutdown(WatchdogShutdown::container_deadline);
    });
  }
  if (config_.idle_timeout.count() > 0) timers_.schedule(config_.idle_timeout, [this] { check_idle(); });
  if (config_.lease.count() > 0) timers_.schedule(config_.lease, [this] { check_lease(); });
}

void Watchdogs::note_activity() { last_activity_.store(timers_.now().time_since_epoch().count()); }

nlohmann::json Watchdogs::heartbeat() {
  auto now = timers_.now();
  last_heartbeat_.store(now.time_since_epoch().count());
  last_activity_.store(now.time_since_epoch().count());
  return describe();
}

nlohmann::json Watchdogs::describe() const {
  auto now = timers_.now();
  auto in = [&](std::optional<Clock::time_point> at) -> nlohmann::json {
    if (!at) return nullptr;
    return std::max(0.0, seconds(*at - now));
  };
  std::optional<Clock::time_point> lease_end;
  if (config_.lease.count() > 0) lease_end = stamp(last_heartbeat_) + config_.lease;
  return {{"lease_s", config_.lease.count() > 0 ? nlohmann::json(seconds(config_.lease)) : nlohmann::json()},
          {"lease_expires_in_s", in(lease_end)},
          {"deadline_in_s", in(deadline_at())},
          {"harvest_in_s", in(harvest_at())},
          {"idle_timeout_s", config_.idle_timeout.count() > 0 ? nlohmann::json(seconds(config_.idle_timeout)) : nlohmann::json()}};
}

void Watchdogs::check_idle() {
  if (fired_) return;
  auto now = timers_.now();
  if (actions_.busy && actions_.busy()) {
    note_activity();
    timers_.schedule(config_.idle_timeout, [this] { check_idle(); });
    return;
  }
  auto idle_since = stamp(last_activity_);
  if (now - idle_since >= config_.idle_timeout) {
    fired_ = true;
    log::warn("idle watchdog: no RPC and no job; shutting down", {{"idle_s", seconds(now - idle_since)}});
    actions_.shutdown(WatchdogShutdown::idle);
    return;
  }
  timers_.schedule(idle_since + config_.idle_timeout - now, [this] { check_idle(); });
}

void Watchdogs::check_lease() {
  if (fired_) return;
  auto now = timers_.now();
  auto renewed = stamp(last_heartbeat_);
  if (now - renewed >= config_.lease) {
    fired_ = true;
    log::warn("owner lease expired: no sys.heartbeat; shutting down", {{"since_s", seconds(now - renewed)}});
    actions_.shutdown(WatchdogShutdown::lease);
    return;
  }
  timers_.schedule(renewed + config_.lease - now, [this] { check_lease(); });
}

}  // namespace gpubox
