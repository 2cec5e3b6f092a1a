// The agent as init: PID 1 of its namespace, and the reaper of every orphan,
// both as PID 1 and as a subreaper outside a namespace.
#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>

#include "tests/integration/integration_test.h"

namespace gpubox::testing {
namespace {

using Pid1 = IntegrationTest;
using Reaping = IntegrationTest;

// The "NSpid:" line of the host's /proc/PID/status: the pid in each namespace, outermost first.
std::vector<long> ns_pids(pid_t host_pid) {
  std::istringstream status(read_file("/proc/" + std::to_string(host_pid) + "/status"));
  std::vector<long> pids;
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("NSpid:", 0) != 0) continue;
    std::istringstream fields(line.substr(6));
    for (long pid; fields >> pid;) pids.push_back(pid);
  }
  return pids;
}

TEST_F(Pid1, AgentIsPidOneInsideItsNamespace) {
  AgentOptions options;
  // The main command reads its own /proc/self/stat with a shell builtin, so
  // field 4 is the shell's parent: the agent, as the namespace's fresh /proc sees it.
  options.command = sh(
      "read -r stat < /proc/self/stat; echo \"$stat\" > \"$1\"; "
      "echo \"$$ $PPID\" > \"$2\"; read -r comm < /proc/1/comm; echo \"$comm\" > \"$3\"; : > \"$4\"; "
      "while [ ! -e \"$5\" ]; do sleep 0.01; done",
      {"stat", "ids", "comm", "written", "go"});
  auto box = start_ready(options);
  ASSERT_TRUE(box);
  ASSERT_TRUE(wait_until([&] { return file_exists(box->path("written")); }, kStartTimeout));

  // Seen from the host: the agent's pid in the new namespace is 1.
  std::vector<long> pids = ns_pids(box->pid());
  ASSERT_EQ(pids.size(), 2u) << "expected a host pid and a namespace pid";
  EXPECT_EQ(pids[0], box->pid());
  EXPECT_EQ(pids[1], 1);

  // Seen from inside: the main command's parent is PID 1, and PID 1 is the agent.
  std::istringstream stat(read_file(box->path("stat")));
  std::string own_pid, comm, state, ppid;
  stat >> own_pid >> comm >> state >> ppid;
  EXPECT_EQ(comm, "(sh)");
  EXPECT_EQ(ppid, "1") << "field 4 of /proc/self/stat: " << read_file(box->path("stat"));
  std::istringstream ids(read_file(box->path("ids")));
  long shell_pid = 0, shell_ppid = 0;
  ids >> shell_pid >> shell_ppid;
  EXPECT_EQ(shell_ppid, 1);
  EXPECT_GT(shell_pid, 1);
  EXPECT_EQ(std::to_string(shell_pid), own_pid) << "the fresh /proc shows the namespace's pids";
  EXPECT_EQ(read_file(box->path("comm")), "gpubox-agent\n");

  write_file(box->path("go"), "");
  EXPECT_EQ(box->wait_exit(kExitTimeout), 0);
  auto starting = log_with(*box, "agent starting");
  ASSERT_EQ(starting.size(), 1u);
  EXPECT_EQ(starting[0].value("pid", 0), 1);
  EXPECT_EQ(starting[0].value("mode", ""), "pid1");
}

TEST_F(Pid1, TheOomKillerPrefersEveryChildToTheAgent) {
  AgentOptions options;
  // Each reads its score a moment after it starts: the agent sets it right after the spawn.
  options.command = sh("sleep 0.2; cat /proc/self/oom_score_adj > \"$1\"; while [ ! -e go ]; do sleep 0.01; done", {"main.adj"});
  options.config = nlohmann::json{
      {"children", {{{"name", "child"}, {"argv", sh("sleep 0.2; cat /proc/self/oom_score_adj > \"$1\"; exec sleep 1000", {"child.adj"})}}}}};
  auto box = start_ready(options);
  ASSERT_TRUE(box);
  ASSERT_TRUE(wait_until([&] { return !read_file(box->path("main.adj")).empty() && !read_file(box->path("child.adj")).empty(); },
                         kStartTimeout));
  // -1000 for the agent and 0 for its children with CAP_SYS_RESOURCE; without
  // it (as in many containers) 0 for the agent and 500 for its children.
  int agent_adj = std::stoi(read_file("/proc/" + std::to_string(box->pid()) + "/oom_score_adj"));
  int main_adj = std::stoi(read_file(box->path("main.adj")));
  int child_adj = std::stoi(read_file(box->path("child.adj")));
  EXPECT_TRUE(agent_adj == -1000 || agent_adj == 0) << agent_adj;
  EXPECT_EQ(main_adj, agent_adj == -1000 ? 0 : 500);
  EXPECT_EQ(child_adj, main_adj);
  write_file(box->path("go"), "");
  EXPECT_EQ(box->wait_exit(kExitTimeout), 0) << box->stderr_text();
}

TEST_F(Pid1, ChildrenDoNotInheritTheReadyFd) {
  // Both as PID 1 and as a subreaper: the main command and a supervised child
  // report whether the agent's ready fd (100, see the harness) is open in them.
  const std::string report =
      "if [ -e /proc/self/fd/100 ]; then echo open; else echo closed; fi > \"$1\"; "
      "while [ ! -e go ]; do sleep 0.01; done";
  for (bool new_pid_namespace : {true, false}) {
    SCOPED_TRACE(new_pid_namespace ? "PID 1" : "subreaper");
    AgentOptions options;
    options.new_pid_namespace = new_pid_namespace;
    options.command = sh(report, {"main.fd"});
    options.config = nlohmann::json{{"children", {{{"name", "child"}, {"argv", sh(report, {"child.fd"})}}}}};
    auto box = start_ready(options);
    ASSERT_TRUE(box);
    ASSERT_TRUE(wait_until([&] { return !read_file(box->path("main.fd")).empty() &&
                                        !read_file(box->path("child.fd")).empty(); },
                           kStartTimeout));
    EXPECT_EQ(read_file(box->path("main.fd")), "closed\n");
    EXPECT_EQ(read_file(box->path("child.fd")), "closed\n");
    // So the pipe ends as soon as the agent closes its end, while everything still runs.
    EXPECT_TRUE(box->wait_ready_fd_closed(milliseconds(2000)));
    EXPECT_TRUE(box->running());
    write_file(box->path("go"), "");
    EXPECT_EQ(box->wait_exit(kExitTimeout), 0) << box->stderr_text();
  }
}

// A main command makes `count` orphans: each subshell forks a background
// process and exits at once, so the background process is reparented to the
// agent. The orphans block opening a FIFO until the test opens it, then each
// appends a line to a file and exits together with the others: `count`
// zombies at once, for the agent to reap. The main command then waits for the
// test to let it finish.
void expect_orphans_reaped(bool new_pid_namespace, int count) {
  AgentOptions options;
  options.new_pid_namespace = new_pid_namespace;
  options.command = sh(
      "mkfifo \"$1\"; i=0; while [ $i -lt \"$3\" ]; do ({ read _ < \"$1\"; echo x >> \"$2\"; } &); i=$((i+1)); done; "
      ": > \"$4\"; while [ ! -e \"$5\" ]; do sleep 0.01; done",
      {"release", "lines", std::to_string(count), "spawned", "go"});
  std::string error;
  auto box = AgentProcess::start(options, &error);
  ASSERT_TRUE(box) << error;
  ASSERT_TRUE(box->wait_ready(kStartTimeout));
  const pid_t agent = box->pid();

  ASSERT_TRUE(wait_until([&] { return file_exists(box->path("spawned")); }, milliseconds(30'000)))
      << "the main command did not finish spawning";
  // Every orphan now is the agent's child: the main command and `count` orphans.
  EXPECT_TRUE(wait_until([&] { return static_cast<int>(children_of(agent).size()) == count + 1; },
                         milliseconds(10'000)))
      << "the agent has " << children_of(agent).size() << " children, expected " << count + 1;

  // Release them all at once; they exit and are the agent's zombies until reaped.
  int fifo = ::open(box->path("release").c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  ASSERT_GE(fifo, 0) << "no orphan is waiting on the FIFO: " << std::strerror(errno);
  ::close(fifo);

  // Every orphan has run, and the agent's only child left is the main command.
  bool settled = wait_until(
      [&] {
        return count_lines(read_file(box->path("lines"))) == count && children_of(agent).size() == 1;
      },
      milliseconds(20'000));
  auto children = children_of(agent);
  EXPECT_TRUE(settled) << count_lines(read_file(box->path("lines"))) << " of " << count
                       << " orphans ran; the agent has " << children.size() << " children, "
                       << count_zombie_children(agent) << " of them zombies";
  EXPECT_EQ(count_lines(read_file(box->path("lines"))), count);
  // Checked while the agent still runs: nothing it should have reaped is left.
  EXPECT_TRUE(box->running());
  EXPECT_EQ(count_zombie_children(agent), 0);
  ASSERT_EQ(children.size(), 1u);
  EXPECT_NE(children[0].state, 'Z');

  write_file(box->path("go"), "");
  EXPECT_EQ(box->wait_exit(kExitTimeout), 0) << box->stderr_text();
  EXPECT_EQ(count_zombie_children(agent), 0);
  EXPECT_TRUE(children_of(agent).empty());
  auto starting = log_with(*box, "agent starting");
  ASSERT_EQ(starting.size(), 1u);
  EXPECT_EQ(starting[0].value("mode", ""), new_pid_namespace ? "pid1" : "subreaper");
}

TEST_F(Reaping, AThousandOrphanedZombiesAsPid1) { expect_orphans_reaped(true, 1000); }

TEST_F(Reaping, OrphansAsSubreaperOutsideANamespace) { expect_orphans_reaped(false, 300); }

}  // namespace
}  // namespace gpubox::testing
