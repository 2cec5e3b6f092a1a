// agent/serve/worker_restarts.h under a fake launcher and a fake clock: the
// restart policy of a served interface's worker (rpc/PROTOCOL.md "Served
// functions") — backoff from 100 ms doubling to 5 s, giving up after
// restart_limit restarts, no restart of a first worker that never loaded,
// and stop or hold cancelling a restart that waits.
#include "agent/serve/worker_restarts.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <vector>

#include "agent/log.h"
#include "tests/mocks/fake_launcher.h"
#include "tests/mocks/fake_timers.h"

namespace gpubox::serve {
namespace {

using namespace std::chrono_literals;
using test::FakeLauncher;
using test::FakeTimers;
using Signal = FakeLauncher::Signal;

constexpr std::chrono::milliseconds kGrace = 2s;

class WorkerRestartsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    log::Options quiet;
    quiet.level = log::Level::off;
    quiet.to_stderr = false;
    log::configure(quiet, nullptr);
  }

  // A policy with restart_limit, its changes recorded.
  WorkerRestarts& make(int restart_limit) {
    restarts_ = std::make_unique<WorkerRestarts>("serve:test", launcher_, timers_, restart_limit, kGrace);
    restarts_->on_change([this](const WorkerRestarts::View& view) { changes_.push_back(view); });
    return *restarts_;
  }

  // Starts the first worker and has it load; returns its pid.
  pid_t start_loaded(WorkerRestarts& restarts) {
    restarts.start();
    EXPECT_EQ(restarts.view().state, ChildState::running);
    restarts.loaded();
    return launcher_.last_pid();
  }

  // Crashes the running worker, checks the restart waits exactly `delay`, and returns the new pid.
  pid_t crash_and_restart_after(WorkerRestarts& restarts, std::chrono::milliseconds delay) {
    std::size_t spawned = launcher_.spawn_count();
    launcher_.kill(launcher_.last_pid(), SIGSEGV);
    EXPECT_EQ(restarts.view().state, ChildState::backoff);
    EXPECT_EQ(timers_.next_delay(), std::optional<FakeTimers::Clock::duration>(delay));
    timers_.advance(delay - 1ms);
    EXPECT_EQ(launcher_.spawn_count(), spawned) << "restarted before its backoff of " << delay.count() << " ms";
    timers_.advance(1ms);
    EXPECT_EQ(launcher_.spawn_count(), spawned + 1) << "not restarted after its backoff of " << delay.count() << " ms";
    EXPECT_EQ(restarts.view().state, ChildState::running);
    return launcher_.last_pid();
  }

  FakeLauncher launcher_;
  FakeTimers timers_;
  std::unique_ptr<WorkerRestarts> restarts_;
  std::vector<WorkerRestarts::View> changes_;
};

TEST_F(WorkerRestartsTest, ACrashedWorkerRestartsAfterTheBackoff) {
  WorkerRestarts& restarts = make(5);
  pid_t first = start_loaded(restarts);
  pid_t second = crash_and_restart_after(restarts, 100ms);
  EXPECT_NE(second, first);
  EXPECT_EQ(restarts.view().restarts, 1);
  ASSERT_GE(changes_.size(), 2u);
  EXPECT_EQ(changes_[changes_.size() - 2].state, ChildState::backoff);
  EXPECT_EQ(changes_[changes_.size() - 2].restarts, 1);
  EXPECT_TRUE(launcher_.signals().empty());
}

TEST_F(WorkerRestartsTest, ACleanExitOfALoadedWorkerIsRestartedToo) {
  WorkerRestarts& restarts = make(5);
  start_loaded(restarts);
  launcher_.exit(launcher_.last_pid(), 0);
  EXPECT_EQ(restarts.view().state, ChildState::backoff);
  timers_.advance(100ms);
  EXPECT_EQ(launcher_.spawn_count(), 2u);
}

TEST_F(WorkerRestartsTest, RepeatedCrashesBackOffDoublingUpToFiveSeconds) {
  WorkerRestarts& restarts = make(20);
  start_loaded(restarts);
  for (auto delay : {100ms, 200ms, 400ms, 800ms, 1600ms, 3200ms, 5000ms, 5000ms}) {
    crash_and_restart_after(restarts, delay);
  }
  EXPECT_EQ(restarts.view().restarts, 8);
  EXPECT_EQ(launcher_.spawn_count(), 9u);
}

TEST_F(WorkerRestartsTest, StopDuringTheBackoffCancelsTheRestart) {
  WorkerRestarts& restarts = make(5);
  start_loaded(restarts);
  launcher_.kill(launcher_.last_pid(), SIGKILL);
  ASSERT_EQ(restarts.view().state, ChildState::backoff);
  ASSERT_EQ(timers_.pending(), 1u);
  timers_.advance(50ms);
  restarts.stop();
  EXPECT_EQ(restarts.view().state, ChildState::stopped);
  EXPECT_TRUE(restarts.idle());
  EXPECT_EQ(timers_.pending(), 0u);
  timers_.advance(1h);
  EXPECT_EQ(launcher_.spawn_count(), 1u);
  EXPECT_EQ(changes_.back().state, ChildState::stopped);
}

TEST_F(WorkerRestartsTest, GivesUpAtTheEndAfterRestartLimitRestarts) {
  WorkerRestarts& restarts = make(2);
  start_loaded(restarts);
  crash_and_restart_after(restarts, 100ms);
  crash_and_restart_after(restarts, 200ms);
  launcher_.kill(launcher_.last_pid(), SIGSEGV);
  EXPECT_EQ(restarts.view().state, ChildState::failed);
  // serve.list counts the end it gave up on: "the worker ended 3 times (restart_limit 2)".
  EXPECT_EQ(restarts.view().restarts, 3);
  EXPECT_EQ(changes_.back().state, ChildState::failed);
  EXPECT_EQ(changes_.back().restarts, 3);
  EXPECT_TRUE(restarts.idle());
  EXPECT_EQ(timers_.pending(), 0u);
  timers_.advance(1h);
  EXPECT_EQ(launcher_.spawn_count(), 3u);
}

TEST_F(WorkerRestartsTest, RestartLimitZeroGivesUpAtTheFirstCrash) {
  WorkerRestarts& restarts = make(0);
  start_loaded(restarts);
  launcher_.kill(launcher_.last_pid(), SIGKILL);
  EXPECT_EQ(restarts.view().state, ChildState::failed);
  EXPECT_EQ(restarts.view().restarts, 1);
  EXPECT_EQ(timers_.pending(), 0u);
  EXPECT_EQ(launcher_.spawn_count(), 1u);
}

TEST_F(WorkerRestartsTest, TheLimitCountsTheServicesWholeLifeNotAWindow) {
  WorkerRestarts& restarts = make(1);
  start_loaded(restarts);
  crash_and_restart_after(restarts, 100ms);
  timers_.advance(24h * 365);
  launcher_.kill(launcher_.last_pid(), SIGSEGV);
  EXPECT_EQ(restarts.view().state, ChildState::failed);
  EXPECT_EQ(restarts.view().restarts, 2);
}

TEST_F(WorkerRestartsTest, AFirstWorkerThatNeverLoadedIsNotRestarted) {
  WorkerRestarts& restarts = make(5);
  restarts.start();
  pid_t pid = launcher_.last_pid();
  launcher_.exit(pid, 1);  // its import failed
  EXPECT_EQ(restarts.view().state, ChildState::stopped);
  EXPECT_TRUE(restarts.idle());
  EXPECT_EQ(timers_.pending(), 0u);
  timers_.advance(1h);
  EXPECT_EQ(launcher_.spawn_count(), 1u);
  // Its end is already reported: nothing is sent to a group that may be someone else's now.
  EXPECT_TRUE(launcher_.signals().empty());
  for (const auto& change : changes_) EXPECT_NE(change.state, ChildState::backoff);
}

TEST_F(WorkerRestartsTest, AFirstWorkerThatCannotStartIsNotRetried) {
  WorkerRestarts& restarts = make(5);
  launcher_.fail_next_spawns(1, Status(ErrorCode::not_found, "no python3"));
  restarts.start();
  EXPECT_EQ(launcher_.attempts(), 1);
  EXPECT_EQ(restarts.view().state, ChildState::stopped);
  EXPECT_EQ(timers_.pending(), 0u);
  timers_.advance(1h);
  EXPECT_EQ(launcher_.attempts(), 1);
  for (const auto& change : changes_) EXPECT_NE(change.state, ChildState::backoff);
}

TEST_F(WorkerRestartsTest, ALaterWorkerThatCannotStartCountsAsACrash) {
  WorkerRestarts& restarts = make(5);
  start_loaded(restarts);
  launcher_.kill(launcher_.last_pid(), SIGSEGV);
  launcher_.fail_next_spawns(1, Status(ErrorCode::not_found, "no python3"));
  timers_.advance(100ms);
  EXPECT_EQ(launcher_.attempts(), 2);
  EXPECT_EQ(restarts.view().state, ChildState::backoff);
  EXPECT_EQ(restarts.view().restarts, 2);
  EXPECT_EQ(timers_.next_delay(), std::optional<FakeTimers::Clock::duration>(200ms));
  timers_.advance(200ms);
  EXPECT_EQ(launcher_.spawn_count(), 2u);
  EXPECT_EQ(restarts.view().state, ChildState::running);
}

TEST_F(WorkerRestartsTest, AWorkerRestartedAfterLoadingOnceIsRestartedEvenIfItsImportFails) {
  WorkerRestarts& restarts = make(5);
  start_loaded(restarts);
  crash_and_restart_after(restarts, 100ms);
  // The restarted worker's import fails (the file changed): an end like any other.
  crash_and_restart_after(restarts, 200ms);
  EXPECT_EQ(restarts.view().restarts, 2);
}

TEST_F(WorkerRestartsTest, HoldKeepsTheWorkerRunningButNeverRestartsIt) {
  WorkerRestarts& restarts = make(5);
  pid_t pid = start_loaded(restarts);
  restarts.hold();
  EXPECT_EQ(restarts.view().state, ChildState::running);
  EXPECT_TRUE(launcher_.signals().empty());
  launcher_.kill(pid, SIGTERM);
  EXPECT_EQ(restarts.view().state, ChildState::stopped);
  EXPECT_EQ(timers_.pending(), 0u);
  timers_.advance(1h);
  EXPECT_EQ(launcher_.spawn_count(), 1u);
}

TEST_F(WorkerRestartsTest, HoldDuringTheBackoffCancelsTheRestart) {
  WorkerRestarts& restarts = make(5);
  start_loaded(restarts);
  launcher_.kill(launcher_.last_pid(), SIGSEGV);
  ASSERT_EQ(restarts.view().state, ChildState::backoff);
  restarts.hold();
  EXPECT_EQ(restarts.view().state, ChildState::stopped);
  timers_.advance(1h);
  EXPECT_EQ(launcher_.spawn_count(), 1u);
}

TEST_F(WorkerRestartsTest, StopTermsTheWorkerThenKillsItAfterTheGrace) {
  WorkerRestarts& restarts = make(5);
  pid_t pid = start_loaded(restarts);
  restarts.stop();
  EXPECT_EQ(restarts.view().state, ChildState::stopping);
  EXPECT_FALSE(restarts.idle());
  ASSERT_EQ(launcher_.signals().size(), 1u);
  EXPECT_EQ(launcher_.signals()[0], (Signal{pid, SIGTERM}));
  timers_.advance(kGrace - 1ms);
  EXPECT_EQ(launcher_.signals().size(), 1u);
  timers_.advance(1ms);
  ASSERT_EQ(launcher_.signals().size(), 2u);
  EXPECT_EQ(launcher_.signals()[1], (Signal{pid, SIGKILL}));
  launcher_.kill(pid, SIGKILL);
  EXPECT_EQ(restarts.view().state, ChildState::stopped);
  EXPECT_TRUE(restarts.idle());
  timers_.advance(1h);
  EXPECT_EQ(launcher_.spawn_count(), 1u);
}

TEST_F(WorkerRestartsTest, AWorkerThatEndsWithinTheGraceIsNotKilled) {
  WorkerRestarts& restarts = make(5);
  pid_t pid = start_loaded(restarts);
  restarts.stop();
  launcher_.exit(pid, 0);
  EXPECT_EQ(restarts.view().state, ChildState::stopped);
  EXPECT_EQ(timers_.pending(), 0u);
  timers_.advance(1h);
  EXPECT_EQ(launcher_.signals().size(), 1u);  // the TERM only
}

}  // namespace
}  // namespace gpubox::serve
