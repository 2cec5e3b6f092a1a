// The supervisor inside the real agent: restart policies, exponential backoff
// read from the log's timestamps, and giving up after max_restarts.
#include <array>
#include <thread>

#include "tests/integration/integration_test.h"

namespace gpubox::testing {
namespace {

using Supervision = IntegrationTest;

nlohmann::json child(const std::string& name, const std::string& script, const std::string& restart) {
  return {{"name", name}, {"argv", sh(script, {name + ".runs"})}, {"restart", restart}};
}

TEST_F(Supervision, CrashingChildIsRestartedWithGrowingDelaysThenFails) {
  auto crasher = child("crasher", "echo x >> \"$1\"; exit 1", "on-failure");
  crasher["backoff_initial_ms"] = 50;
  crasher["max_restarts"] = 3;
  AgentOptions options;
  options.config = nlohmann::json{{"children", {crasher}}};
  auto box = start_ready(options);
  ASSERT_TRUE(box);
  ASSERT_TRUE(box->wait_for_log("child failed: gave up restarting", kStartTimeout, "crasher")) << box->log_text();

  auto started = log_with(*box, "child started", "crasher");
  auto exited = log_with(*box, "child exited", "crasher");
  ASSERT_EQ(started.size(), 4u) << "the first start and 3 restarts\n" << box->log_text();
  ASSERT_EQ(exited.size(), 4u);
  for (const auto& e : exited) EXPECT_EQ(e.value("status", ""), "exited with code 1");
  EXPECT_EQ(count_lines(read_file(box->path("crasher.runs"))), 4);

  // Delays of 50, 100 and 200 ms: each gap between starts is at least its
  // delay (plus the child's own run), and each is longer than the one before.
  std::array<double, 3> gaps_ms{};
  for (size_t i = 0; i < gaps_ms.size(); ++i) {
    long long before = parse_log_timestamp_us(started[i].value("ts", ""));
    long long after = parse_log_timestamp_us(started[i + 1].value("ts", ""));
    ASSERT_GT(before, 0);
    ASSERT_GT(after, 0);
    gaps_ms[i] = static_cast<double>(after - before) / 1000.0;
  }
  const std::array<double, 3> nominal = {50, 100, 200};
  for (size_t i = 0; i < gaps_ms.size(); ++i) {
    EXPECT_GE(gaps_ms[i], nominal[i]) << "restart " << i + 1 << " came early";
    EXPECT_LT(gaps_ms[i], nominal[i] + 500) << "restart " << i + 1 << " came far too late";
  }
  EXPECT_LT(gaps_ms[0], gaps_ms[1]);
  EXPECT_LT(gaps_ms[1], gaps_ms[2]);

  auto failed = log_with(*box, "child failed: gave up restarting", "crasher");
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0].value("restarts_in_window", -1), 3);
  EXPECT_GE(parse_log_timestamp_us(failed[0].value("ts", "")), parse_log_timestamp_us(exited.back().value("ts", "")));

  EXPECT_TRUE(box->running());
  ASSERT_TRUE(box->signal(SIGTERM));
  EXPECT_EQ(box->wait_exit(kExitTimeout), 0);
}

TEST_F(Supervision, RestartAlwaysRestartsAChildThatExitsZero) {
  auto looper = child("looper", "echo x >> \"$1\"; exit 0", "always");
  looper["backoff_initial_ms"] = 10;
  looper["backoff_max_ms"] = 50;
  looper["max_restarts"] = 1000;
  AgentOptions options;
  options.config = nlohmann::json{{"children", {looper}}};
  auto box = start_ready(options);
  ASSERT_TRUE(box);
  ASSERT_TRUE(wait_until([&] { return count_lines(read_file(box->path("looper.runs"))) >= 4; }, kStartTimeout));
  ASSERT_TRUE(box->wait_for_log("child exited", kStartTimeout, "looper"));
  EXPECT_EQ(log_with(*box, "child exited", "looper")[0].value("status", ""), "exited with code 0");
  EXPECT_TRUE(log_with(*box, "child failed: gave up restarting").empty());
  ASSERT_TRUE(box->signal(SIGTERM));
  EXPECT_EQ(box->wait_exit(kExitTimeout), 0) << box->stderr_text();
  EXPECT_GE(log_with(*box, "child started", "looper").size(), 4u);
}

TEST_F(Supervision, RestartNeverAndOnFailureAfterSuccessDoNotRestart) {
  auto never = child("never", "echo x >> \"$1\"; exit 1", "never");
  auto on_failure = child("clean", "echo x >> \"$1\"; exit 0", "on-failure");
  never["backoff_initial_ms"] = 10;
  on_failure["backoff_initial_ms"] = 10;
  AgentOptions options;
  options.config = nlohmann::json{{"children", {never, on_failure}}};
  auto box = start_ready(options);
  ASSERT_TRUE(box);
  ASSERT_TRUE(box->wait_for_log("child exited", kStartTimeout, "never"));
  ASSERT_TRUE(box->wait_for_log("child exited", kStartTimeout, "clean"));
  // An observation window, not synchronisation: a restart after a 10 ms
  // backoff would show up well within it.
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_EQ(log_with(*box, "child started", "never").size(), 1u);
  EXPECT_EQ(log_with(*box, "child started", "clean").size(), 1u);
  EXPECT_EQ(count_lines(read_file(box->path("never.runs"))), 1);
  EXPECT_EQ(count_lines(read_file(box->path("clean.runs"))), 1);
  EXPECT_TRUE(log_with(*box, "child failed: gave up restarting").empty());
  EXPECT_TRUE(box->running()) << "the agent outlives children that ended for good";
  ASSERT_TRUE(box->signal(SIGTERM));
  EXPECT_EQ(box->wait_exit(kExitTimeout), 0) << box->stderr_text();
}

}  // namespace
}  // namespace gpubox::testing
