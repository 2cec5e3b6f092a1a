// Watchdogs under a fake clock: harvest one margin before the deadline, the
// deadline itself, idle (postponed while busy), and the owner lease.
#include "agent/lifecycle/watchdogs.h"

#include <gtest/gtest.h>

#include "tests/mocks/fake_timers.h"

namespace gpubox {
namespace {

using namespace std::chrono_literals;

struct Recorder {
  std::vector<std::string> events;
  bool busy = false;
  test::FakeTimers* timers = nullptr;
  WatchdogActions actions() {
    WatchdogActions a;
    a.harvest = [this] { events.push_back("harvest@" + std::to_string(now_ms())); };
    a.shutdown = [this](WatchdogShutdown r) { events.push_back(watchdog_shutdown_name(r) + "@" + std::to_string(now_ms())); };
    a.busy = [this] { return busy; };
    return a;
  }
  long long now_ms() const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(timers->now().time_since_epoch() - std::chrono::hours(1000)).count();
  }
};

TEST(Watchdogs, HarvestFiresOneMarginBeforeTheDeadlineThenTheDeadlineShutsDown) {
  test::FakeTimers timers;
  Recorder recorder{{}, false, &timers};
  LifecycleConfig config;
  config.timeout = 10s;
  config.harvest_margin = 3s;
  Watchdogs watchdogs(timers, config, recorder.actions());
  EXPECT_EQ(*watchdogs.harvest_at() - timers.now(), 7s);
  watchdogs.start();
  timers.advance(6999ms);
  EXPECT_TRUE(recorder.events.empty());
  timers.advance(1ms);
  EXPECT_EQ(recorder.events, (std::vector<std::string>{"harvest@7000"}));
  timers.advance(3s);
  EXPECT_EQ(recorder.events, (std::vector<std::string>{"harvest@7000", "container_deadline@10000"}));
}

TEST(Watchdogs, MarginLongerThanTheLifeHarvestsAtOnce) {
  test::FakeTimers timers;
  Recorder recorder{{}, false, &timers};
  LifecycleConfig config;
  config.timeout = 2s;
  config.harvest_margin = 60s;
  Watchdogs watchdogs(timers, config, recorder.actions());
  watchdogs.start();
  timers.advance(0ms);
  EXPECT_EQ(recorder.events, (std::vector<std::string>{"harvest@0"}));
}

TEST(Watchdogs, IdleShutsDownAfterTheTimeoutCountedFromTheLastActivity) {
  test::FakeTimers timers;
  Recorder recorder{{}, false, &timers};
  LifecycleConfig config;
  config.idle_timeout = 5s;
  Watchdogs watchdogs(timers, config, recorder.actions());
  watchdogs.start();
  timers.advance(3s);
  watchdogs.note_activity();  // at 3 s
  timers.advance(4s);         // 7 s: idle for 4 s only
  EXPECT_TRUE(recorder.events.empty());
  timers.advance(1s);
  EXPECT_EQ(recorder.events, (std::vector<std::string>{"idle@8000"}));
}

TEST(Watchdogs, IdleNeverFiresWhileAJobIsBusy) {
  test::FakeTimers timers;
  Recorder recorder{{}, true, &timers};
  LifecycleConfig config;
  config.idle_timeout = 1s;
  Watchdogs watchdogs(timers, config, recorder.actions());
  watchdogs.start();
  timers.advance(10s);
  EXPECT_TRUE(recorder.events.empty());
  recorder.busy = false;  // the job ended at ~10 s
  timers.advance(1s);
  timers.advance(1s);
  ASSERT_EQ(recorder.events.size(), 1u);
  EXPECT_EQ(recorder.events[0].rfind("idle@", 0), 0u);
}

TEST(Watchdogs, LeaseExpiresWithoutHeartbeatsAndHeartbeatsRenewIt) {
  test::FakeTimers timers;
  Recorder recorder{{}, false, &timers};
  LifecycleConfig config;
  config.lease = 10s;
  Watchdogs watchdogs(timers, config, recorder.actions());
  watchdogs.start();
  timers.advance(8s);
  auto described = watchdogs.heartbeat();
  EXPECT_DOUBLE_EQ(described["lease_expires_in_s"].get<double>(), 10.0);
  EXPECT_TRUE(described["deadline_in_s"].is_null());
  timers.advance(9s);
  EXPECT_TRUE(recorder.events.empty());
  timers.advance(1s);
  EXPECT_EQ(recorder.events, (std::vector<std::string>{"lease@18000"}));
}

TEST(Watchdogs, NothingConfiguredNothingFires) {
  test::FakeTimers timers;
  Recorder recorder{{}, false, &timers};
  Watchdogs watchdogs(timers, LifecycleConfig{}, recorder.actions());
  watchdogs.start();
  timers.advance(std::chrono::hours(24 * 30));
  EXPECT_TRUE(recorder.events.empty());
  EXPECT_EQ(watchdogs.harvest_at(), std::nullopt);
}

}  // namespace
}  // namespace gpubox
