// Graceful shutdown on SIGTERM: TERM to every child, KILL after the grace to
// what is left, in that order in the log; a second SIGTERM skips the grace;
// and a crashing child never takes the agent down.
#include <algorithm>

#include "tests/integration/integration_test.h"

namespace gpubox::testing {
namespace {

using Shutdown = IntegrationTest;

// Writes "A got TERM" on TERM and exits 0 a moment later.
nlohmann::json polite_child(const std::string& name) {
  return {{"name", name},
          {"argv", sh("trap 'echo \"A got TERM\" > \"$1\"; sleep 0.2; exit 0' TERM; : > \"$2\"; "
                      "while :; do sleep 0.05; done",
                      {name + ".got", name + ".armed"})}};
}

// Ignores TERM; only KILL ends it.
nlohmann::json stubborn_child(const std::string& name) {
  return {{"name", name},
          {"argv", sh("trap '' TERM; : > \"$1\"; while :; do sleep 0.1; done", {name + ".armed"})}};
}

// Position of the first log message equal to msg; -1 when absent.
long position_of(const std::vector<std::string>& messages, const std::string& msg) {
  auto it = std::find(messages.begin(), messages.end(), msg);
  return it == messages.end() ? -1 : static_cast<long>(it - messages.begin());
}

// Position of the first log entry with this message and child; -1 when absent.
long position_of_child(const AgentProcess& box, const std::string& msg, const std::string& child) {
  auto entries = box.log_entries();
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].value("msg", "") == msg && entries[i].value("child", "") == child) return static_cast<long>(i);
  }
  return -1;
}

bool armed(const AgentProcess& box, std::initializer_list<std::string> names) {
  return std::all_of(names.begin(), names.end(), [&](const std::string& n) { return file_exists(box.path(n + ".armed")); });
}

TEST_F(Shutdown, TermsEveryChildThenKillsWhatIgnoresTermAfterTheGrace) {
  AgentOptions options;
  options.flags = {"--grace-seconds", "1"};
  options.config = nlohmann::json{{"children", {polite_child("a"), stubborn_child("b")}}};
  auto box = start_ready(options);
  ASSERT_TRUE(box);
  ASSERT_TRUE(wait_until([&] { return armed(*box, {"a", "b"}); }, kStartTimeout));

  auto sent = Clock::now();
  ASSERT_TRUE(box->signal(SIGTERM));
  ASSERT_EQ(box->wait_exit(kExitTimeout), 1) << "exit 1: the shutdown needed KILL\n" << box->stderr_text();
  double took = seconds_between(sent, box->exited_at());
  EXPECT_GE(took, 0.95) << "b was killed before the grace ran out";
  EXPECT_LT(took, 2.5) << "the shutdown took far longer than the grace";

  // a ended through its TERM trap, b by KILL.
  EXPECT_EQ(read_file(box->path("a.got")), "A got TERM\n");
  auto a_exit = log_with(*box, "child exited", "a");
  auto b_exit = log_with(*box, "child exited", "b");
  ASSERT_EQ(a_exit.size(), 1u);
  ASSERT_EQ(b_exit.size(), 1u);
  EXPECT_EQ(a_exit[0].value("status", ""), "exited with code 0");
  EXPECT_EQ(b_exit[0].value("status", ""), "killed by SIGKILL");

  auto messages = log_messages(*box);
  long shutting = position_of(messages, "shutting down");
  long a_ended = position_of_child(*box, "child exited", "a");
  long killing = position_of(messages, "killing what is left");
  long exiting = position_of(messages, "agent exiting");
  ASSERT_GE(shutting, 0);
  ASSERT_GE(killing, 0);
  ASSERT_GE(exiting, 0);
  EXPECT_LT(shutting, a_ended);
  EXPECT_LT(a_ended, killing) << "a ended through TERM, before the KILL";
  EXPECT_LT(shutting, killing);
  EXPECT_LT(killing, exiting);
  EXPECT_EQ(exiting, static_cast<long>(messages.size()) - 1) << "nothing is logged after \"agent exiting\"";
  auto exit_entry = log_with(*box, "agent exiting");
  ASSERT_EQ(exit_entry.size(), 1u);
  EXPECT_EQ(exit_entry[0].value("exit_code", -1), 1);
  EXPECT_EQ(exit_entry[0].value("killed_after_grace", false), true);
}

TEST_F(Shutdown, WellBehavedChildrenEndCleanlyLongBeforeTheGrace) {
  AgentOptions options;
  options.flags = {"--grace-seconds", "5"};
  options.config = nlohmann::json{
      {"children",
       {polite_child("a"),
        {{"name", "plain"}, {"argv", sh(": > \"$1\"; exec sleep 1000", {"plain.armed"})}}}}};
  auto box = start_ready(options);
  ASSERT_TRUE(box);
  ASSERT_TRUE(wait_until([&] { return armed(*box, {"a", "plain"}); }, kStartTimeout));

  auto sent = Clock::now();
  ASSERT_TRUE(box->signal(SIGTERM));
  EXPECT_EQ(box->wait_exit(kExitTimeout), 0) << box->stderr_text();
  EXPECT_LT(seconds_between(sent, box->exited_at()), 1.5) << "a clean shutdown must not wait out the 5 s grace";
  EXPECT_EQ(read_file(box->path("a.got")), "A got TERM\n");
  auto messages = log_messages(*box);
  EXPECT_LT(position_of(messages, "shutting down"), position_of(messages, "agent exiting"));
  EXPECT_EQ(position_of(messages, "killing what is left"), -1);
}

TEST_F(Shutdown, OrphansInTheirOwnSessionGetTermToo) {
  // The child leaves `sleep` behind in a session of its own and exits: the
  // orphan is reparented to the agent, in no group the agent knows of.
  AgentOptions options;
  options.flags = {"--grace-seconds", "5"};
  options.config = nlohmann::json{
      {"children", {{{"name", "spawner"}, {"restart", "never"}, {"argv", sh("setsid sleep 1003 & : > \"$1\"", {"spawner.armed"})}}}}};
  auto box = start_ready(options);
  ASSERT_TRUE(box);
  ASSERT_TRUE(wait_until([&] { return armed(*box, {"spawner"}) && !log_with(*box, "child exited", "spawner").empty(); },
                         kStartTimeout));

  auto sent = Clock::now();
  ASSERT_TRUE(box->signal(SIGTERM));
  EXPECT_EQ(box->wait_exit(kExitTimeout), 0) << "the orphan ended on TERM, nothing needed KILL\n" << box->stderr_text();
  EXPECT_LT(seconds_between(sent, box->exited_at()), 1.5) << "the orphan got no TERM: the agent waited out the grace";
  EXPECT_EQ(position_of(log_messages(*box), "killing what is left"), -1);
}

TEST_F(Shutdown, SecondSigtermSkipsTheGrace) {
  AgentOptions options;
  options.flags = {"--grace-seconds", "30"};
  options.config = nlohmann::json{{"children", {stubborn_child("b")}}};
  auto box = start_ready(options);
  ASSERT_TRUE(box);
  ASSERT_TRUE(wait_until([&] { return armed(*box, {"b"}); }, kStartTimeout));

  auto sent = Clock::now();
  ASSERT_TRUE(box->signal(SIGTERM));
  ASSERT_TRUE(box->wait_for_log("shutting down", kStartTimeout));
  EXPECT_TRUE(box->running());
  ASSERT_TRUE(box->signal(SIGTERM));
  EXPECT_EQ(box->wait_exit(kExitTimeout), 1) << box->stderr_text();
  EXPECT_LT(seconds_between(sent, box->exited_at()), 3.0) << "the second SIGTERM must not wait out the 30 s grace";
  auto messages = log_messages(*box);
  long second = position_of(messages, "second shutdown signal: skipping the rest of the grace");
  EXPECT_GE(second, 0);
  EXPECT_LT(position_of(messages, "shutting down"), second);
  EXPECT_LT(second, position_of(messages, "killing what is left"));
  EXPECT_LT(position_of(messages, "killing what is left"), position_of(messages, "agent exiting"));
}

TEST_F(Shutdown, ACrashingChildNeverEndsTheAgent) {
  AgentOptions options;
  options.config = nlohmann::json{
      {"children",
       {{{"name", "crasher"},
         {"argv", sh("echo x >> \"$1\"; kill -SEGV $$", {"crasher.runs"})},
         {"restart", "on-failure"},
         {"backoff_initial_ms", 10},
         {"max_restarts", 2}}}}};
  auto box = start_ready(options);
  ASSERT_TRUE(box);
  ASSERT_TRUE(box->wait_for_log("child failed: gave up restarting", kStartTimeout, "crasher")) << box->log_text();
  auto exits = log_with(*box, "child exited", "crasher");
  ASSERT_EQ(exits.size(), 3u);
  for (const auto& e : exits) EXPECT_EQ(e.value("status", "").rfind("killed by SIGSEGV", 0), 0u) << e.dump();
  EXPECT_EQ(count_lines(read_file(box->path("crasher.runs"))), 3);

  // Still alive and still answering: a forwarded signal is logged, and SIGTERM ends it cleanly.
  EXPECT_TRUE(box->running());
  ASSERT_TRUE(box->signal(SIGUSR1));
  EXPECT_TRUE(box->wait_for_log("forwarding signal", kStartTimeout));
  EXPECT_TRUE(box->running());
  auto sent = Clock::now();
  ASSERT_TRUE(box->signal(SIGTERM));
  EXPECT_EQ(box->wait_exit(kExitTimeout), 0) << box->stderr_text();
  EXPECT_LT(seconds_between(sent, box->exited_at()), 2.0);
}

}  // namespace
}  // namespace gpubox::testing
