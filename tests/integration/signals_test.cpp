// The signal policy, seen from the processes that receive the signals: every
// forwarded signal reaches the main command, or without one every supervised
// child; SIGINT without a main command shuts the agent down.
#include <string.h>

#include "tests/integration/integration_test.h"

namespace gpubox::testing {
namespace {

using Signals = IntegrationTest;

struct NamedSignal {
  int number;
  const char* name;  // as `trap` spells it
};

constexpr NamedSignal kForwardedToMain[] = {{SIGHUP, "HUP"},   {SIGINT, "INT"},   {SIGQUIT, "QUIT"},
                                            {SIGUSR1, "USR1"}, {SIGUSR2, "USR2"}, {SIGWINCH, "WINCH"}};

TEST_F(Signals, EachForwardedSignalReachesTheMainCommand) {
  // One sandbox per signal, all at once: the main command traps the signal,
  // writes its name and exits 0.
  std::vector<std::unique_ptr<AgentProcess>> boxes;
  for (const auto& sig : kForwardedToMain) {
    AgentOptions options;
    options.command = sh("trap 'echo \"$1\" > \"$2\"; exit 0' \"$1\"; : > \"$3\"; while :; do sleep 0.01; done",
                         {sig.name, "received", "armed"});
    boxes.push_back(start_ready(options));
    ASSERT_TRUE(boxes.back());
  }
  for (size_t i = 0; i < boxes.size(); ++i) {
    AgentProcess& box = *boxes[i];
    ASSERT_TRUE(wait_until([&] { return file_exists(box.path("armed")); }, kStartTimeout));
    ASSERT_TRUE(box.signal(kForwardedToMain[i].number));
  }
  for (size_t i = 0; i < boxes.size(); ++i) {
    AgentProcess& box = *boxes[i];
    const std::string name = kForwardedToMain[i].name;
    SCOPED_TRACE("SIG" + name);
    EXPECT_EQ(box.wait_exit(kExitTimeout), 0) << box.stderr_text();
    EXPECT_EQ(read_file(box.path("received")), name + "\n");
    auto forwarded = log_with(box, "forwarding signal");
    ASSERT_EQ(forwarded.size(), 1u);
    EXPECT_EQ(forwarded[0].value("signal", ""), "SIG" + name);
    EXPECT_TRUE(log_with(box, "shutting down").size() == 1) << "the command's exit ends the agent";
  }
}

TEST_F(Signals, WithoutAMainCommandEverySupervisedChildGetsThem) {
  constexpr NamedSignal kForwarded[] = {{SIGHUP, "HUP"},   {SIGQUIT, "QUIT"},   {SIGUSR1, "USR1"},
                                        {SIGUSR2, "USR2"}, {SIGWINCH, "WINCH"}, {SIGCONT, "CONT"}};
  // Each child appends the name of every signal it catches to its own file.
  const std::string script =
      "for s in HUP QUIT USR1 USR2 WINCH CONT; do trap \"echo $s >> $1\" $s; done; : > \"$2\"; "
      "while :; do sleep 0.01; done";
  AgentOptions options;
  options.flags = {"--grace-seconds", "5"};
  // Relative paths: children run in the agent's cwd, the sandbox directory.
  options.config = nlohmann::json{
      {"children",
       {{{"name", "a"}, {"argv", sh(script, {"a.got", "a.armed"})}, {"restart", "never"}},
        {{"name", "b"}, {"argv", sh(script, {"b.got", "b.armed"})}, {"restart", "never"}}}}};
  auto box = start_ready(options);
  ASSERT_TRUE(box);
  ASSERT_TRUE(wait_until([&] { return file_exists(box->path("a.armed")) && file_exists(box->path("b.armed")); },
                         kStartTimeout));

  std::string expected;
  for (const auto& sig : kForwarded) {
    SCOPED_TRACE(std::string("SIG") + sig.name);
    expected += std::string(sig.name) + "\n";
    ASSERT_TRUE(box->signal(sig.number));
    // One at a time: two pending instances of one signal would merge.
    EXPECT_TRUE(wait_until(
        [&] { return read_file(box->path("a.got")) == expected && read_file(box->path("b.got")) == expected; },
        milliseconds(5000)))
        << "a got:\n" << read_file(box->path("a.got")) << "b got:\n" << read_file(box->path("b.got"));
  }
  EXPECT_TRUE(box->running());
  EXPECT_EQ(log_with(*box, "child started").size(), 2u) << "no child died of a forwarded signal";
  EXPECT_EQ(log_with(*box, "forwarding signal").size(), std::size(kForwarded));

  ASSERT_TRUE(box->signal(SIGTERM));
  EXPECT_EQ(box->wait_exit(kExitTimeout), 0) << box->stderr_text();
}

TEST_F(Signals, SigintWithoutAMainCommandShutsDown) {
  AgentOptions options;
  options.config = nlohmann::json{
      {"children", {{{"name", "idle"}, {"argv", sh(": > \"$1\"; exec sleep 1000", {"armed"})}}}}};
  auto box = start_ready(options);
  ASSERT_TRUE(box);
  ASSERT_TRUE(wait_until([&] { return file_exists(box->path("armed")); }, kStartTimeout));
  ASSERT_TRUE(box->signal(SIGINT));
  EXPECT_EQ(box->wait_exit(kExitTimeout), 0) << box->stderr_text();
  auto shutting = log_with(*box, "shutting down");
  ASSERT_EQ(shutting.size(), 1u);
  EXPECT_EQ(shutting[0].value("reason", ""), "signal SIGINT");
  EXPECT_TRUE(log_with(*box, "forwarding signal").empty());
}

}  // namespace
}  // namespace gpubox::testing
