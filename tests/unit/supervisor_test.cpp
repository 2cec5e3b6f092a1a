// agent/supervisor.h under a fake launcher and a fake clock: restart
// policies, exact backoff delays, giving up, stopping with a grace, and
// shutdown of every child.
#include "agent/supervisor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <cstdlib>
#include <tuple>

#include "tests/mocks/fake_launcher.h"
#include "tests/mocks/fake_timers.h"

namespace gpubox {
namespace {

using namespace std::chrono_literals;
using test::FakeLauncher;
using test::FakeTimers;
using Signal = FakeLauncher::Signal;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr std::chrono::milliseconds kGrace = 5s;

class SupervisorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The supervisor logs every start and exit; keep the test output clean.
    log::Options quiet;
    quiet.level = log::Level::off;
    quiet.to_stderr = false;
    log::configure(quiet, nullptr);
  }

  static ChildSpec spec(const std::string& name, RestartPolicy policy = RestartPolicy::on_failure) {
    ChildSpec child;
    child.name = name;
    child.argv = {"/bin/" + name, "--flag"};
    child.restart = policy;
    child.backoff_initial = 100ms;
    child.backoff_max = 1000ms;
    child.max_restarts = 100;
    child.restart_window = 1h;
    return child;
  }

  // Declares and starts a child; returns its pid.
  pid_t start(ChildSpec child) {
    std::string name = child.name;
    EXPECT_TRUE(supervisor_.add(std::move(child)));
    EXPECT_TRUE(supervisor_.start(name));
    EXPECT_EQ(state(name), ChildState::running);
    return info(name).pid;
  }

  ChildInfo info(const std::string& name) const {
    auto found = supervisor_.info(name);
    if (!found) {
      ADD_FAILURE() << "no child " << name;
      return {};
    }
    return *found;
  }
  ChildState state(const std::string& name) const { return info(name).state; }

  FakeLauncher launcher_;
  FakeTimers timers_;
  Supervisor supervisor_{launcher_, timers_, kGrace};
};

TEST_F(SupervisorTest, StartRunsTheChildWithItsSpec) {
  ChildSpec child = spec("kernel");
  child.cwd = "/work";
  pid_t pid = start(child);
  ASSERT_EQ(launcher_.spawn_count(), 1u);
  const auto& spawned = launcher_.spawned()[0];
  EXPECT_EQ(spawned.pid, pid);
  EXPECT_THAT(spawned.options.argv, ElementsAre("/bin/kernel", "--flag"));
  EXPECT_EQ(spawned.options.cwd, "/work");
  ChildInfo running = info("kernel");
  EXPECT_EQ(running.state, ChildState::running);
  EXPECT_EQ(running.pid, pid);
  EXPECT_EQ(running.restarts, 0);
  EXPECT_FALSE(running.last_exit.has_value());
  EXPECT_EQ(timers_.pending(), 0u);
  // Starting a running child does nothing.
  EXPECT_TRUE(supervisor_.start("kernel"));
  EXPECT_EQ(launcher_.spawn_count(), 1u);
}

TEST_F(SupervisorTest, UnknownAndDuplicateNames) {
  EXPECT_EQ(supervisor_.start("nope").code(), ErrorCode::not_found);
  EXPECT_EQ(supervisor_.stop("nope").code(), ErrorCode::not_found);
  EXPECT_EQ(supervisor_.restart("nope").code(), ErrorCode::not_found);
  EXPECT_FALSE(supervisor_.info("nope").has_value());
  EXPECT_TRUE(supervisor_.add(spec("a")));
  EXPECT_EQ(supervisor_.add(spec("a")).code(), ErrorCode::already_exists);
  EXPECT_EQ(state("a"), ChildState::stopped);
  EXPECT_EQ(launcher_.attempts(), 0);
}

TEST_F(SupervisorTest, EnvironmentIsCommonThenOwnWithoutRemovedNames) {
  ::setenv("GPUBOX_UNIT_KEEP", "kept", 1);
  ::setenv("GPUBOX_UNIT_REMOVE", "must-not-leak", 1);
  ::setenv("GPUBOX_UNIT_SHARED", "from-agent", 1);
  Supervisor supervisor(launcher_, timers_, kGrace,
                        {{"COMMON", "1"}, {"GPUBOX_UNIT_SHARED", "from-common"}},
                        {"GPUBOX_UNIT_REMOVE"});
  ChildSpec child = spec("a");
  child.env = {{"OWN", "2"}, {"GPUBOX_UNIT_SHARED", "from-child"}};
  ASSERT_TRUE(supervisor.add(child));
  ASSERT_TRUE(supervisor.start("a"));
  ::unsetenv("GPUBOX_UNIT_KEEP");
  ::unsetenv("GPUBOX_UNIT_REMOVE");
  ::unsetenv("GPUBOX_UNIT_SHARED");

  ASSERT_EQ(launcher_.spawn_count(), 1u);
  const std::vector<std::string>& env = launcher_.spawned()[0].options.env;
  auto entries_of = [&](const std::string& name) {
    std::vector<std::string> found;
    for (const auto& entry : env) {
      if (entry.compare(0, name.size() + 1, name + "=") == 0) found.push_back(entry);
    }
    return found;
  };
  EXPECT_THAT(entries_of("GPUBOX_UNIT_KEEP"), ElementsAre("GPUBOX_UNIT_KEEP=kept"));
  EXPECT_THAT(entries_of("GPUBOX_UNIT_REMOVE"), ElementsAre());
  EXPECT_THAT(entries_of("COMMON"), ElementsAre("COMMON=1"));
  EXPECT_THAT(entries_of("OWN"), ElementsAre("OWN=2"));
  // One entry per name: the child's own value wins over the common one.
  EXPECT_THAT(entries_of("GPUBOX_UNIT_SHARED"), ElementsAre("GPUBOX_UNIT_SHARED=from-child"));
}

TEST_F(SupervisorTest, OnFailureBackoffDoublesFromInitialUpToMax) {
  pid_t pid = start(spec("a"));
  const std::chrono::milliseconds expected[] = {100ms, 200ms, 400ms, 800ms, 1000ms, 1000ms, 1000ms};
  int restarts = 0;
  for (auto delay : expected) {
    launcher_.exit(pid, 1);
    ChildInfo waiting = info("a");
    ASSERT_EQ(waiting.state, ChildState::backoff);
    EXPECT_EQ(waiting.pid, 0);
    ASSERT_TRUE(waiting.last_exit.has_value());
    EXPECT_EQ(waiting.last_exit->code, 1);
    ASSERT_EQ(timers_.pending(), 1u);
    EXPECT_EQ(timers_.next_delay(), std::optional<FakeTimers::Clock::duration>(delay)) << "restart " << restarts + 1;

    size_t spawned = launcher_.spawn_count();
    timers_.advance(delay - 1ms);
    EXPECT_EQ(state("a"), ChildState::backoff) << "restarted early, before " << delay.count() << "ms";
    EXPECT_EQ(launcher_.spawn_count(), spawned);
    timers_.advance(1ms);
    ASSERT_EQ(state("a"), ChildState::running);
    ASSERT_EQ(launcher_.spawn_count(), spawned + 1);
    EXPECT_NE(launcher_.last_pid(), pid);
    pid = launcher_.last_pid();
    EXPECT_EQ(info("a").pid, pid);
    EXPECT_EQ(info("a").restarts, ++restarts);
  }
}

TEST_F(SupervisorTest, OnFailureRestartsAfterASignalToo) {
  pid_t pid = start(spec("a"));
  launcher_.kill(pid, SIGSEGV);
  EXPECT_EQ(state("a"), ChildState::backoff);
  EXPECT_EQ(info("a").last_exit->signal, SIGSEGV);
  timers_.advance(100ms);
  EXPECT_EQ(state("a"), ChildState::running);
}

TEST_F(SupervisorTest, OnFailureDoesNotRestartASuccess) {
  pid_t pid = start(spec("a"));
  launcher_.exit(pid, 0);
  EXPECT_EQ(state("a"), ChildState::exited);
  EXPECT_EQ(timers_.pending(), 0u);
  timers_.advance(1h);
  EXPECT_EQ(launcher_.spawn_count(), 1u);
  EXPECT_EQ(state("a"), ChildState::exited);
}

TEST_F(SupervisorTest, AlwaysRestartsOnSuccessToo) {
  pid_t pid = start(spec("a", RestartPolicy::always));
  launcher_.exit(pid, 0);
  EXPECT_EQ(state("a"), ChildState::backoff);
  EXPECT_EQ(timers_.next_delay(), std::optional<FakeTimers::Clock::duration>(100ms));
  timers_.advance(100ms);
  EXPECT_EQ(state("a"), ChildState::running);
  EXPECT_EQ(launcher_.spawn_count(), 2u);
  // And on failure, with the doubled delay.
  launcher_.exit(launcher_.last_pid(), 3);
  EXPECT_EQ(state("a"), ChildState::backoff);
  EXPECT_EQ(timers_.next_delay(), std::optional<FakeTimers::Clock::duration>(200ms));
}

TEST_F(SupervisorTest, NeverDoesNotRestart) {
  pid_t pid = start(spec("a", RestartPolicy::never));
  launcher_.exit(pid, 2);
  ChildInfo done = info("a");
  EXPECT_EQ(done.state, ChildState::exited);
  EXPECT_EQ(done.pid, 0);
  EXPECT_EQ(done.last_exit->code, 2);
  EXPECT_EQ(timers_.pending(), 0u);
  timers_.advance(1h);
  EXPECT_EQ(launcher_.spawn_count(), 1u);
  // An exited child can be started again by hand.
  EXPECT_TRUE(supervisor_.start("a"));
  EXPECT_EQ(state("a"), ChildState::running);
  EXPECT_EQ(launcher_.spawn_count(), 2u);
}

TEST_F(SupervisorTest, GivesUpAfterMaxRestartsWithinTheWindow) {
  ChildSpec child = spec("a");
  child.max_restarts = 3;
  child.restart_window = 60s;
  child.backoff_initial = 10ms;
  child.backoff_max = 10ms;
  start(child);
  for (int i = 1; i <= 3; ++i) {
    launcher_.exit(launcher_.last_pid(), 1);
    ASSERT_EQ(state("a"), ChildState::backoff) << "failure " << i;
    timers_.advance(10ms);
    ASSERT_EQ(state("a"), ChildState::running) << "failure " << i;
    EXPECT_EQ(info("a").restarts, i);
  }
  // A fourth failure would be a fourth restart within 60 s: more than 3.
  launcher_.exit(launcher_.last_pid(), 1);
  ChildInfo failed = info("a");
  EXPECT_EQ(failed.state, ChildState::failed);
  EXPECT_EQ(failed.restarts, 3);
  EXPECT_EQ(failed.pid, 0);
  EXPECT_EQ(timers_.pending(), 0u);
  timers_.advance(1h);
  EXPECT_EQ(launcher_.spawn_count(), 4u);
  EXPECT_EQ(state("a"), ChildState::failed);

  // start() gives it a fresh count.
  EXPECT_TRUE(supervisor_.start("a"));
  EXPECT_EQ(state("a"), ChildState::running);
  EXPECT_EQ(info("a").restarts, 0);
  launcher_.exit(launcher_.last_pid(), 1);
  EXPECT_EQ(state("a"), ChildState::backoff);
}

TEST_F(SupervisorTest, MaxRestartsZeroFailsOnTheFirstFailure) {
  ChildSpec child = spec("a");
  child.max_restarts = 0;
  pid_t pid = start(child);
  launcher_.exit(pid, 1);
  EXPECT_EQ(state("a"), ChildState::failed);
  EXPECT_EQ(launcher_.spawn_count(), 1u);
}

TEST_F(SupervisorTest, RestartsOlderThanTheWindowNoLongerCount) {
  ChildSpec child = spec("a");
  child.max_restarts = 2;
  child.restart_window = 1s;
  child.backoff_initial = 100ms;
  child.backoff_max = 10s;
  start(child);
  launcher_.exit(launcher_.last_pid(), 1);  // t=0: restart 1, after 100 ms
  EXPECT_EQ(timers_.next_delay(), std::optional<FakeTimers::Clock::duration>(100ms));
  timers_.advance(100ms);
  launcher_.exit(launcher_.last_pid(), 1);  // t=100: restart 2, after 200 ms
  EXPECT_EQ(timers_.next_delay(), std::optional<FakeTimers::Clock::duration>(200ms));
  timers_.advance(200ms);
  ASSERT_EQ(state("a"), ChildState::running);

  // Runs long enough for both restarts (t=0 and t=100) to leave the window.
  timers_.advance(1s);  // t=1300
  launcher_.exit(launcher_.last_pid(), 1);
  EXPECT_EQ(state("a"), ChildState::backoff) << "restarts older than the window still counted";
  // The backoff starts over from the initial delay as well.
  EXPECT_EQ(timers_.next_delay(), std::optional<FakeTimers::Clock::duration>(100ms));
  timers_.advance(100ms);
  EXPECT_EQ(state("a"), ChildState::running);
}

TEST_F(SupervisorTest, RestartsWithinTheWindowStillCount) {
  ChildSpec child = spec("a");
  child.max_restarts = 2;
  child.restart_window = 1s;
  child.backoff_initial = 100ms;
  child.backoff_max = 10s;
  start(child);
  launcher_.exit(launcher_.last_pid(), 1);  // t=0
  timers_.advance(100ms);
  launcher_.exit(launcher_.last_pid(), 1);  // t=100
  timers_.advance(200ms);
  timers_.advance(650ms);  // t=950: both restarts (t=0, t=100) are within 1 s
  launcher_.exit(launcher_.last_pid(), 1);
  EXPECT_EQ(state("a"), ChildState::failed);

  // Only the oldest restart left the window: one counts, so one more is allowed.
  ASSERT_TRUE(supervisor_.start("a"));
  launcher_.exit(launcher_.last_pid(), 1);  // T=0
  timers_.advance(100ms);
  launcher_.exit(launcher_.last_pid(), 1);  // T=100
  timers_.advance(200ms);
  timers_.advance(750ms);  // T=1050: the T=0 restart left the window, T=100 did not
  launcher_.exit(launcher_.last_pid(), 1);
  EXPECT_EQ(state("a"), ChildState::backoff);
  EXPECT_EQ(timers_.next_delay(), std::optional<FakeTimers::Clock::duration>(200ms));
}

TEST_F(SupervisorTest, SpawnFailureCountsAsAFailure) {
  launcher_.fail_next_spawns(1, Status(ErrorCode::not_found, "cannot run '/bin/a': No such file or directory"));
  ASSERT_TRUE(supervisor_.add(spec("a")));
  EXPECT_TRUE(supervisor_.start("a"));
  ChildInfo waiting = info("a");
  EXPECT_EQ(waiting.state, ChildState::backoff);
  EXPECT_EQ(waiting.pid, 0);
  EXPECT_THAT(waiting.last_error, HasSubstr("cannot run '/bin/a'"));
  EXPECT_EQ(waiting.restarts, 1);
  EXPECT_EQ(timers_.next_delay(), std::optional<FakeTimers::Clock::duration>(100ms));
  timers_.advance(100ms);
  ChildInfo running = info("a");
  EXPECT_EQ(running.state, ChildState::running);
  EXPECT_EQ(running.last_error, "");
  EXPECT_EQ(launcher_.attempts(), 2);
}

TEST_F(SupervisorTest, RepeatedSpawnFailuresGiveUp) {
  launcher_.fail_next_spawns(100, Status(ErrorCode::permission_denied, "cannot run '/bin/a': Permission denied"));
  ChildSpec child = spec("a");
  child.max_restarts = 2;
  ASSERT_TRUE(supervisor_.add(child));
  EXPECT_TRUE(supervisor_.start("a"));
  while (timers_.run_next()) {
  }
  EXPECT_EQ(state("a"), ChildState::failed);
  EXPECT_EQ(launcher_.attempts(), 3);
  EXPECT_THAT(info("a").last_error, HasSubstr("Permission denied"));
}

TEST_F(SupervisorTest, SpawnFailureWithNeverFailsAtOnce) {
  launcher_.fail_next_spawns(1, Status(ErrorCode::not_found, "cannot run"));
  ASSERT_TRUE(supervisor_.add(spec("a", RestartPolicy::never)));
  EXPECT_TRUE(supervisor_.start("a"));
  EXPECT_EQ(state("a"), ChildState::failed);
  EXPECT_EQ(timers_.pending(), 0u);
}

TEST_F(SupervisorTest, StopSendsTermThenKillAfterTheGrace) {
  pid_t pid = start(spec("a", RestartPolicy::always));
  EXPECT_TRUE(supervisor_.stop("a"));
  EXPECT_EQ(state("a"), ChildState::stopping);
  EXPECT_EQ(info("a").pid, pid);
  EXPECT_THAT(launcher_.signals(), ElementsAre(Signal{pid, SIGTERM}));
  timers_.advance(kGrace - 1ms);
  EXPECT_THAT(launcher_.signals(), ElementsAre(Signal{pid, SIGTERM}));
  timers_.advance(1ms);
  EXPECT_THAT(launcher_.signals(), ElementsAre(Signal{pid, SIGTERM}, Signal{pid, SIGKILL}));
  EXPECT_EQ(state("a"), ChildState::stopping);

  launcher_.kill(pid, SIGKILL);
  EXPECT_EQ(state("a"), ChildState::stopped);
  EXPECT_EQ(info("a").pid, 0);
  EXPECT_EQ(info("a").last_exit->signal, SIGKILL);
  // Stopped on request: not restarted, even with restart "always".
  EXPECT_EQ(timers_.pending(), 0u);
  timers_.advance(1h);
  EXPECT_EQ(launcher_.spawn_count(), 1u);
  EXPECT_EQ(launcher_.signals().size(), 2u);
}

TEST_F(SupervisorTest, StopWithinTheGraceSendsNoKill) {
  pid_t pid = start(spec("a", RestartPolicy::always));
  EXPECT_TRUE(supervisor_.stop("a"));
  timers_.advance(kGrace / 2);
  launcher_.kill(pid, SIGTERM);
  EXPECT_EQ(state("a"), ChildState::stopped);
  EXPECT_EQ(timers_.pending(), 0u);
  timers_.advance(1h);
  EXPECT_THAT(launcher_.signals(), ElementsAre(Signal{pid, SIGTERM}));
  EXPECT_EQ(launcher_.spawn_count(), 1u);
}

TEST_F(SupervisorTest, StopDuringBackoffCancelsTheRestart) {
  pid_t pid = start(spec("a"));
  launcher_.exit(pid, 1);
  ASSERT_EQ(state("a"), ChildState::backoff);
  EXPECT_TRUE(supervisor_.stop("a"));
  EXPECT_EQ(state("a"), ChildState::stopped);
  EXPECT_EQ(timers_.pending(), 0u);
  timers_.advance(1h);
  EXPECT_EQ(launcher_.spawn_count(), 1u);
  EXPECT_TRUE(launcher_.signals().empty());
}

TEST_F(SupervisorTest, RestartWhileRunningStopsThenStartsWithAFreshCount) {
  start(spec("a"));
  for (int i = 0; i < 3; ++i) {
    launcher_.exit(launcher_.last_pid(), 1);
    timers_.run_next();
  }
  ASSERT_EQ(state("a"), ChildState::running);
  ASSERT_EQ(info("a").restarts, 3);
  pid_t old_pid = launcher_.last_pid();

  EXPECT_TRUE(supervisor_.restart("a"));
  EXPECT_EQ(state("a"), ChildState::stopping);
  EXPECT_THAT(launcher_.signals(), ElementsAre(Signal{old_pid, SIGTERM}));
  EXPECT_EQ(launcher_.spawn_count(), 4u) << "started again before the old process ended";

  launcher_.kill(old_pid, SIGTERM);
  ChildInfo restarted = info("a");
  EXPECT_EQ(restarted.state, ChildState::running);
  EXPECT_EQ(launcher_.spawn_count(), 5u);
  EXPECT_NE(restarted.pid, old_pid);
  EXPECT_EQ(restarted.pid, launcher_.last_pid());
  EXPECT_EQ(restarted.restarts, 0);
  // The kill timer of the old process is gone; no stray KILL later.
  timers_.advance(1h);
  EXPECT_EQ(launcher_.signals().size(), 1u);
  // A fresh count: the next failure waits the initial delay, not 800 ms.
  launcher_.exit(restarted.pid, 1);
  EXPECT_EQ(timers_.next_delay(), std::optional<FakeTimers::Clock::duration>(100ms));
}

TEST_F(SupervisorTest, RestartOfAChildIgnoringTermKillsItFirst) {
  pid_t pid = start(spec("a"));
  EXPECT_TRUE(supervisor_.restart("a"));
  timers_.advance(kGrace);
  EXPECT_THAT(launcher_.signals(), ElementsAre(Signal{pid, SIGTERM}, Signal{pid, SIGKILL}));
  EXPECT_EQ(launcher_.spawn_count(), 1u);
  launcher_.kill(pid, SIGKILL);
  EXPECT_EQ(state("a"), ChildState::running);
  EXPECT_EQ(launcher_.spawn_count(), 2u);
}

TEST_F(SupervisorTest, RestartOfAStoppedOrBackoffChildStartsItNow) {
  ASSERT_TRUE(supervisor_.add(spec("a")));
  EXPECT_TRUE(supervisor_.restart("a"));
  EXPECT_EQ(state("a"), ChildState::running);
  launcher_.exit(launcher_.last_pid(), 1);
  ASSERT_EQ(state("a"), ChildState::backoff);
  EXPECT_TRUE(supervisor_.restart("a"));
  EXPECT_EQ(state("a"), ChildState::running);
  EXPECT_EQ(info("a").restarts, 0);
  EXPECT_EQ(launcher_.spawn_count(), 2u);
  // The cancelled backoff timer does not start a third process.
  timers_.advance(1h);
  EXPECT_EQ(launcher_.spawn_count(), 2u);
}

TEST_F(SupervisorTest, StopAllStopsEveryChildAndCallsDoneOnce) {
  pid_t a = start(spec("a", RestartPolicy::always));
  pid_t b = start(spec("b"));
  pid_t c = start(spec("c"));
  launcher_.exit(c, 1);
  ASSERT_EQ(state("c"), ChildState::backoff);
  ASSERT_TRUE(supervisor_.add(spec("never-started")));

  int done = 0;
  supervisor_.stop_all([&] { ++done; });
  EXPECT_EQ(done, 0);
  EXPECT_EQ(state("a"), ChildState::stopping);
  EXPECT_EQ(state("b"), ChildState::stopping);
  EXPECT_EQ(state("c"), ChildState::stopped);
  EXPECT_EQ(state("never-started"), ChildState::stopped);
  EXPECT_THAT(launcher_.signals(), ::testing::UnorderedElementsAre(Signal{a, SIGTERM}, Signal{b, SIGTERM}));

  launcher_.exit(a, 0);
  EXPECT_EQ(done, 0);
  EXPECT_EQ(state("a"), ChildState::stopped);
  launcher_.kill(b, SIGTERM);
  EXPECT_EQ(done, 1);
  EXPECT_EQ(state("b"), ChildState::stopped);

  // Nothing restarts afterwards, and nothing can be started.
  timers_.advance(1h);
  EXPECT_EQ(done, 1);
  EXPECT_EQ(launcher_.spawn_count(), 3u);
  EXPECT_EQ(supervisor_.start("a").code(), ErrorCode::unavailable);
  EXPECT_EQ(supervisor_.restart("b").code(), ErrorCode::unavailable);
  EXPECT_EQ(launcher_.spawn_count(), 3u);
}

TEST_F(SupervisorTest, StopAllKillsChildrenThatIgnoreTerm) {
  pid_t a = start(spec("a"));
  int done = 0;
  supervisor_.stop_all([&] { ++done; });
  timers_.advance(kGrace);
  EXPECT_THAT(launcher_.signals(), ElementsAre(Signal{a, SIGTERM}, Signal{a, SIGKILL}));
  EXPECT_EQ(done, 0);
  launcher_.kill(a, SIGKILL);
  EXPECT_EQ(done, 1);
  EXPECT_EQ(launcher_.spawn_count(), 1u);
}

TEST_F(SupervisorTest, StopAllWithNothingRunningIsDoneAtOnce) {
  ASSERT_TRUE(supervisor_.add(spec("a")));
  int done = 0;
  supervisor_.stop_all([&] { ++done; });
  EXPECT_EQ(done, 1);
}

TEST_F(SupervisorTest, StopAllCancelsAPendingRestart) {
  pid_t a = start(spec("a"));
  ASSERT_TRUE(supervisor_.restart("a"));  // stopping, with a start to follow
  int done = 0;
  supervisor_.stop_all([&] { ++done; });
  launcher_.kill(a, SIGTERM);
  EXPECT_EQ(done, 1);
  EXPECT_EQ(state("a"), ChildState::stopped);
  EXPECT_EQ(launcher_.spawn_count(), 1u);
}

TEST_F(SupervisorTest, KillAllSignalsEveryLiveChild) {
  pid_t a = start(spec("a"));
  pid_t b = start(spec("b"));
  ASSERT_TRUE(supervisor_.stop("b"));
  supervisor_.kill_all();
  EXPECT_THAT(launcher_.signals(),
              ::testing::UnorderedElementsAre(Signal{b, SIGTERM}, Signal{a, SIGKILL}, Signal{b, SIGKILL}));
}

TEST_F(SupervisorTest, OnChangeSeesEveryTransition) {
  std::vector<std::tuple<std::string, ChildState, pid_t>> changes;
  supervisor_.on_change([&](const ChildInfo& child) { changes.emplace_back(child.name, child.state, child.pid); });
  pid_t first = start(spec("a"));
  launcher_.exit(first, 1);
  timers_.advance(100ms);
  pid_t second = launcher_.last_pid();
  ASSERT_TRUE(supervisor_.stop("a"));
  launcher_.kill(second, SIGTERM);
  ASSERT_TRUE(supervisor_.restart("a"));
  pid_t third = launcher_.last_pid();
  launcher_.exit(third, 0);

  using Change = std::tuple<std::string, ChildState, pid_t>;
  EXPECT_THAT(changes, ElementsAre(Change{"a", ChildState::running, first},
                                   Change{"a", ChildState::backoff, 0},
                                   Change{"a", ChildState::running, second},
                                   Change{"a", ChildState::stopping, second},
                                   Change{"a", ChildState::stopped, 0},
                                   Change{"a", ChildState::running, third},
                                   Change{"a", ChildState::exited, 0}));
}

TEST_F(SupervisorTest, ExitOfAnOldGenerationIsIgnored) {
  pid_t old_pid = start(spec("a"));
  launcher_.exit(old_pid, 1);
  timers_.advance(100ms);
  pid_t new_pid = launcher_.last_pid();
  ASSERT_EQ(state("a"), ChildState::running);

  // The first process's exit arrives again, late.
  launcher_.deliver(old_pid, test::exited_with(9));
  ChildInfo current = info("a");
  EXPECT_EQ(current.state, ChildState::running);
  EXPECT_EQ(current.pid, new_pid);
  EXPECT_EQ(current.last_exit->code, 1);
  EXPECT_EQ(current.restarts, 1);
  EXPECT_EQ(timers_.pending(), 0u);
  EXPECT_EQ(launcher_.spawn_count(), 2u);

  // Also after restart(): the stopped process's exit cannot stop the new one.
  ASSERT_TRUE(supervisor_.restart("a"));
  launcher_.kill(new_pid, SIGTERM);
  pid_t newest = launcher_.last_pid();
  ASSERT_NE(newest, new_pid);
  launcher_.deliver(new_pid, test::killed_by(SIGTERM));
  EXPECT_EQ(state("a"), ChildState::running);
  EXPECT_EQ(info("a").pid, newest);
}

TEST_F(SupervisorTest, ListReportsEveryChild) {
  start(spec("b"));
  ASSERT_TRUE(supervisor_.add(spec("a")));
  std::vector<ChildInfo> children = supervisor_.list();
  ASSERT_EQ(children.size(), 2u);
  std::sort(children.begin(), children.end(), [](const auto& x, const auto& y) { return x.name < y.name; });
  EXPECT_EQ(children[0].name, "a");
  EXPECT_EQ(children[0].state, ChildState::stopped);
  EXPECT_EQ(children[1].name, "b");
  EXPECT_EQ(children[1].state, ChildState::running);
  EXPECT_EQ(child_state_name(ChildState::backoff), "backoff");
  EXPECT_EQ(child_state_name(ChildState::failed), "failed");
}

TEST_F(SupervisorTest, DestroyedSupervisorIgnoresLateExits) {
  auto supervisor = std::make_unique<Supervisor>(launcher_, timers_, kGrace);
  ASSERT_TRUE(supervisor->add(spec("a")));
  ASSERT_TRUE(supervisor->start("a"));
  pid_t pid = launcher_.last_pid();
  ASSERT_TRUE(supervisor->stop("a"));
  supervisor.reset();
  EXPECT_EQ(timers_.pending(), 0u);  // its kill timer was cancelled
  launcher_.kill(pid, SIGTERM);      // must not touch the destroyed supervisor
  SUCCEED();
}

}  // namespace
}  // namespace gpubox
