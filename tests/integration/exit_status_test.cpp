// Exit-status propagation, as tini's test suite sweeps it: every code 0–255,
// death by signal as 128 + signal, and a main command that cannot start.
#include <cstdlib>
#include <filesystem>

#include "tests/integration/integration_test.h"

namespace gpubox::testing {
namespace {

using ExitStatusTest = IntegrationTest;

// Environment for the many short-lived agents of the sweep. Under the
// sanitizers, LeakSanitizer's exit-time scan would double each agent's cost;
// every other test still runs the agent with it.
std::vector<std::string> sweep_env() {
#ifdef GPUBOX_SANITIZE
  const char* asan = std::getenv("ASAN_OPTIONS");
  return {std::string("ASAN_OPTIONS=") + (asan && *asan ? std::string(asan) + ":" : "") + "detect_leaks=0"};
#else
  return {};
#endif
}

// These tests start many agents at once and wait for the first: under ASan
// on 2 loaded cores, starting them alone took 9 s of the 10 s kExitTimeout
// was, and CI failed on both tests. They check exit codes, not speed, so each
// agent gets a minute.
constexpr milliseconds kManyAgentsExitTimeout{60'000};

TEST_F(ExitStatusTest, EveryCodeFrom0To255) {
  constexpr int kBatch = 32;  // agents in flight at once
  for (int first = 0; first < 256; first += kBatch) {
    std::vector<std::unique_ptr<AgentProcess>> boxes;
    for (int code = first; code < first + kBatch; ++code) {
      AgentOptions options;
      options.command = {"/bin/sh", "-c", "exit " + std::to_string(code)};
      options.env = sweep_env();
      boxes.push_back(start(options));
      ASSERT_TRUE(boxes.back());
    }
    for (int i = 0; i < kBatch; ++i) {
      EXPECT_EQ(boxes[static_cast<size_t>(i)]->wait_exit(kManyAgentsExitTimeout), first + i)
          << boxes[static_cast<size_t>(i)]->stderr_text();
    }
  }
}

TEST_F(ExitStatusTest, DeathBySignalIs128PlusTheSignal) {
  struct Case {
    const char* name;
    int number;
  };
  const Case cases[] = {{"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT}, {"ABRT", SIGABRT},
                        {"KILL", SIGKILL}, {"USR1", SIGUSR1}, {"SEGV", SIGSEGV}, {"USR2", SIGUSR2},
                        {"PIPE", SIGPIPE}, {"ALRM", SIGALRM}, {"TERM", SIGTERM}};
  std::vector<std::unique_ptr<AgentProcess>> boxes;
  for (const auto& c : cases) {
    AgentOptions options;
    options.command = sh("kill -s \"$1\" $$", {c.name});
    boxes.push_back(start(options));
    ASSERT_TRUE(boxes.back());
  }
  for (size_t i = 0; i < boxes.size(); ++i) {
    SCOPED_TRACE(std::string("SIG") + cases[i].name);
    EXPECT_EQ(boxes[i]->wait_exit(kManyAgentsExitTimeout), 128 + cases[i].number) << boxes[i]->stderr_text();
    auto ended = log_with(*boxes[i], "main command ended");
    ASSERT_EQ(ended.size(), 1u);
    EXPECT_EQ(ended[0].value("status", "").rfind("killed by SIG" + std::string(cases[i].name), 0), 0u)
        << ended[0].dump();
  }
  // The common ones, spelled out.
  EXPECT_EQ(boxes[10]->exit_status(), 143);  // TERM
  EXPECT_EQ(boxes[4]->exit_status(), 137);   // KILL
  EXPECT_EQ(boxes[6]->exit_status(), 139);   // SEGV
}

// The one line on stderr that is not a JSON log line.
std::vector<std::string> plain_stderr_lines(const AgentProcess& box) {
  std::vector<std::string> lines;
  std::string text = box.stderr_text();
  size_t begin = 0;
  for (size_t end; (end = text.find('\n', begin)) != std::string::npos; begin = end + 1) {
    std::string line = text.substr(begin, end - begin);
    if (!line.empty() && line[0] != '{') lines.push_back(line);
  }
  return lines;
}

TEST_F(ExitStatusTest, ProgramNotFoundIs127) {
  for (const std::string& program : std::vector<std::string>{"no-such-program-gpubox", "/no/such/dir/prog-gpubox"}) {
    SCOPED_TRACE(program);
    AgentOptions options;
    options.command = {program, "arg"};
    auto box = start(options);
    ASSERT_TRUE(box);
    EXPECT_EQ(box->wait_exit(kExitTimeout), 127);
    auto lines = plain_stderr_lines(*box);
    ASSERT_EQ(lines.size(), 1u) << box->stderr_text();
    EXPECT_NE(lines[0].find(program), std::string::npos) << lines[0];
    EXPECT_FALSE(box->wait_ready(milliseconds(1000))) << "an agent whose command cannot start is never ready";
  }
}

TEST_F(ExitStatusTest, NotExecutableIs126) {
  AgentOptions options;
  std::string dir = make_temp_dir("gpubox-it-noexec");
  std::string script = dir + "/script.sh";
  write_file(script, "#!/bin/sh\nexit 0\n", 0644);
  for (const std::string& program : std::vector<std::string>{script, dir}) {  // a file without x bits, and a directory
    SCOPED_TRACE(program);
    options.command = {program};
    auto box = start(options);
    ASSERT_TRUE(box);
    EXPECT_EQ(box->wait_exit(kExitTimeout), 126);
    auto lines = plain_stderr_lines(*box);
    ASSERT_EQ(lines.size(), 1u) << box->stderr_text();
    EXPECT_NE(lines[0].find(program), std::string::npos) << lines[0];
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gpubox::testing
