// The agent as init: PID 1 of its namespace, and the reaper of every orphan,
// both as PID 1 and as a subreaper outside a namespace.
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>

#include "base/fd.h"
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
// agent. Each orphan opens a FIFO (the test holds it open for reading and
// writing, so the open never blocks), says so in a file, and blocks reading
// it. Once every orphan has said so, the test closes its end: every read ends
// at once, and each orphan appends a line to a file and exits: `count`
// zombies together, for the agent to reap. The main command then waits for the
// test to let it finish. (Waiting for each orphan's own word, not for the
// process to exist, is what makes the release reach all of them.)
void expect_orphans_reaped(bool new_pid_namespace, int count) {
  AgentOptions options;
  options.new_pid_namespace = new_pid_namespace;
  options.command = sh(
      "while [ ! -e \"$6\" ]; do sleep 0.01; done; "
      "i=0; while [ $i -lt \"$3\" ]; do ({ exec 3< \"$1\"; echo r >> \"$6\"; read _ <&3; echo x >> \"$2\"; } &); i=$((i+1)); done; "
      ": > \"$4\"; while [ ! -e \"$5\" ]; do sleep 0.01; done",
      {"release", "lines", std::to_string(count), "spawned", "go", "waiting"});
  std::string error;
  auto box = AgentProcess::start(options, &error);
  ASSERT_TRUE(box) << error;
  ASSERT_TRUE(box->wait_ready(kStartTimeout));
  const pid_t agent = box->pid();
  ASSERT_EQ(::mkfifo(box->path("release").c_str(), 0600), 0) << std::strerror(errno);
  Fd fifo(::open(box->path("release").c_str(), O_RDWR | O_CLOEXEC));  // closed on any way out
  ASSERT_TRUE(fifo.valid()) << std::strerror(errno);
  write_file(box->path("waiting"), "");  // the main command's go-ahead

  ASSERT_TRUE(wait_until([&] { return file_exists(box->path("spawned")); }, milliseconds(30'000)))
      << "the main command did not finish spawning";
  // Every orphan now is the agent's child: the main command and `count` orphans.
  EXPECT_TRUE(wait_until([&] { return static_cast<int>(children_of(agent).size()) == count + 1; },
                         milliseconds(10'000)))
      << "the agent has " << children_of(agent).size() << " children, expected " << count + 1;

  EXPECT_TRUE(wait_until([&] { return count_lines(read_file(box->path("waiting"))) == count; }, milliseconds(30'000)))
      << count_lines(read_file(box->path("waiting"))) << " of " << count << " orphans wait on the FIFO";

  // Release them all at once: the FIFO's last writer goes, every read ends, and
  // the orphans exit and are the agent's zombies until reaped.
  fifo.reset();

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
