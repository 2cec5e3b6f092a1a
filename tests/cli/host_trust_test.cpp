// The host trusts nothing sandbox code can write (docs/security.md, "What
// the host reads"): code in a sandbox, root inside, can neither replace the
// RPC socket the host talks to (local), nor plant a link, FIFO or forged
// record where the host reads the agent's log and exit record (every
// backend), nor see other sandboxes' cgroups or the container engines'
// storage (local), nor go through PID 1's descriptors (local, podman).
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <thread>

#include <gmock/gmock.h>

#include "tests/cli/cli_fixture.h"

namespace gpubox::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Waits (up to 20 s) until path holds text; true when it does.
bool wait_for_text(const std::string& path, const std::string& text) {
  for (auto deadline = Clock::now() + std::chrono::seconds(20); Clock::now() < deadline;) {
    if (read_text(path).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// An impostor in the sandbox: unlinks the agent's socket in /run/gpubox,
// binds its own there and notes "bound", then "greeted" for every
// connection that reaches it. It runs on after the exec that started it.
const char kImpostor[] = R"(
import os, socket
path = '/run/gpubox/rpc.sock'
try:
    os.unlink(path)
except FileNotFoundError:
    pass
s = socket.socket(socket.AF_UNIX)
s.bind(path)
s.listen(8)
note = lambda text: open('/workspace/impostor.txt', 'a').write(text + '\n')
note('bound')
while True:
    c, _ = s.accept()
    c.settimeout(2)
    try:
        note('greeted %d bytes' % len(c.recv(64)))
    except OSError:
        note('greeted')
)";

TEST_F(CliTest, AnImpostorOfTheSocketInTheSandboxNeverHearsTheHost) {
  std::string id = create();
  write_text(scratch() + "/impostor.py", kImpostor);
  ASSERT_EQ(run({"put", id, scratch() + "/impostor.py", "/workspace/impostor.py"}).status, 0);
  CliRun started = run({"exec", id, "--", "sh", "-c", "setsid python3 /workspace/impostor.py </dev/null >/dev/null 2>&1 &"});
  ASSERT_EQ(started.status, 0) << started.err;
  std::string notes = store_dir() + "/" + id + "/work/impostor.txt";
  ASSERT_TRUE(wait_for_text(notes, "bound")) << read_text(notes);

  // The host's next calls reach the real agent, promptly.
  auto began = Clock::now();
  CliRun exec = run({"exec", id, "--", "echo", "real agent"});
  EXPECT_EQ(exec.status, 0) << exec.err;
  EXPECT_EQ(exec.out, "real agent\n");
  CliRun usage = run({"usage", id, "--json"});
  EXPECT_EQ(usage.status, 0) << usage.err;
  EXPECT_LT(Clock::now() - began, std::chrono::seconds(20));
  // The impostor is still there, and heard nothing.
  EXPECT_EQ(run({"exec", id, "--", "sh", "-c", "test -S /run/gpubox/rpc.sock && pgrep -f impostor.py >/dev/null && echo alive"}).out,
            "alive\n");
  EXPECT_EQ(read_text(notes), "bound\n");
  // The host's socket is in its own directory, outside the sandbox's /run/gpubox.
  EXPECT_EQ(record(id)["endpoint"], "ipc://" + store_dir() + "/" + id + "/host/rpc.sock");
}

// On every backend: where the host reads the agent's log (a host-private
// file, docker's own log, or through a control plane's agent) a link or FIFO that
// sandbox code plants at /run/gpubox/agent.log is never followed.
TEST_P(BackendCliTest, ALinkOrFifoPlantedAsTheAgentsLogIsNotWhatTheHostReads) {
  std::string id = create();
  // A host file the sandbox cannot see (its /tmp is its own).
  write_text(scratch() + "/host-only.txt", "host-only-content-1f3c\n");
  CliRun planted = run({"exec", id, "--", "sh", "-c",
                        "test ! -e " + scratch() + "/host-only.txt && rm -f /run/gpubox/agent.log && "
                        "ln -s " + scratch() + "/host-only.txt /run/gpubox/agent.log && echo planted"});
  ASSERT_EQ(planted.out, "planted\n") << planted.err;
  CliRun logs = run({"logs", id});
  EXPECT_THAT(logs.out, Not(HasSubstr("host-only-content")));
  // On a control plane the log is the sandbox's own file, read inside it: the planted link is all there is.
  if (!control_plane()) {
    EXPECT_EQ(logs.status, 0) << logs.err;
    EXPECT_THAT(logs.out, HasSubstr("agent starting"));
  }

  CliRun fifo = run({"exec", id, "--", "sh", "-c", "rm -f /run/gpubox/agent.log && mkfifo /run/gpubox/agent.log && echo fifo"});
  ASSERT_EQ(fifo.out, "fifo\n") << fifo.err;
  auto began = Clock::now();
  logs = run({"logs", id});
  EXPECT_LT(Clock::now() - began, std::chrono::seconds(20)) << "a FIFO hung `gpubox logs`";
  if (!control_plane()) {
    EXPECT_EQ(logs.status, 0) << logs.err;
    EXPECT_THAT(logs.out, HasSubstr("agent starting"));
  }
}

// On every backend that keeps the end on this host: an exit record that
// sandbox code writes to /run/gpubox is not how the sandbox ended (the
// agent's real record is host-private, or, for docker, the engine's word).
TEST_P(BackendCliTest, AForgedExitRecordIsNotHowTheSandboxEnded) {
  std::string id = create();
  CliRun forged = run({"exec", id, "--", "sh", "-c",
                       "echo '{\"reason\": \"shutdown\", \"detail\": \"forged\", \"exit_code\": 0}' > /run/gpubox/exit.json && echo forged"});
  ASSERT_EQ(forged.out, "forged\n") << forged.err;
  pid_t agent = agent_pid(id);
  ASSERT_EQ(::kill(agent, SIGKILL), 0);
  for (int i = 0; i < 500; ++i) {
    std::string stat = read_text("/proc/" + std::to_string(agent) + "/stat");
    if (stat.empty() || stat.find(") Z") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  auto info = listing_after_agent_died();
  ASSERT_EQ(info.size(), 1u);
  EXPECT_EQ(info[0]["state"], "dead");
  EXPECT_NE(info[0]["ended"]["reason"], "shutdown") << info.dump();
  EXPECT_THAT(info[0]["ended"].dump(), Not(HasSubstr("forged")));
  // The cluster saw the pod fail; the agent's own record, in the pod, went with it.
  if (kubernetes()) EXPECT_EQ(info[0]["ended"]["reason"], "ended_on_kubernetes") << info.dump();
  if (!control_plane()) EXPECT_EQ(info[0]["ended"]["reason"], "agent_crashed") << info.dump();
  expect_dead_sandbox_cleaned_up(id);
}

TEST_F(CliTest, ASandboxSeesOnlyItsOwnCgroup) {
  std::string first = create({"--memory", "256"});
  std::string second = create({"--memory", "256"});
  ASSERT_FALSE(cgroups_of(second).empty()) << "the host gave the sandbox no cgroup";
  CliRun looked = run({"exec", first, "--", "sh", "-c",
                       "cat /proc/self/cgroup; find /sys/fs/cgroup -maxdepth 6 2>/dev/null; echo end"});
  EXPECT_EQ(looked.status, 0) << looked.err;
  EXPECT_THAT(looked.out, Not(HasSubstr(second)));
  EXPECT_THAT(looked.out, Not(HasSubstr("gpubox-" + first)));
  EXPECT_THAT(looked.out, HasSubstr("/memory.")) << "the sandbox's own memory cgroup is in sight";
  // Its own cgroup is the root of its cgroup namespace.
  CliRun own = run({"exec", first, "--", "sh", "-c", "grep -v ':/$' /proc/self/cgroup; echo end"});
  EXPECT_EQ(own.out, "end\n");
  // The limit still holds.
  CliRun big = run({"exec", first, "--", "python3", "-c", "b = b'x' * (512 << 20); print('allocated')"});
  EXPECT_EQ(big.status, 128 + SIGKILL) << big.out << big.err;
}

TEST_F(CliTest, TheContainerEnginesStorageIsHidden) {
  std::string id = create();
  std::string marker_dir = "/var/tmp/gpubox-scratch-" + id;
  fs::create_directories(marker_dir);
  write_text(marker_dir + "/layer.txt", "another container's file\n");
  std::string listing;
  for (const char* dir : {"/var/lib/containers", "/var/lib/docker", "/var/lib/containerd", "/var/tmp"}) {
    listing += std::string("test ! -e ") + dir + " || ls -A " + dir + "; ";
  }
  CliRun looked = run({"exec", id, "--", "sh", "-c", listing + "echo end"});
  std::error_code ignored;
  fs::remove_all(marker_dir, ignored);
  EXPECT_EQ(looked.out, "end\n") << looked.err;
  // The sandbox's own /var/tmp works.
  EXPECT_EQ(run({"exec", id, "--", "sh", "-c", "echo mine > /var/tmp/own && cat /var/tmp/own"}).out, "mine\n");
}

// What docs/security.md says holds: PID 1's descriptor of the host-private
// dir (fd) is listed, and nothing is reached through it.
// run: the test's CLI runner.
void expect_host_dir_fd_unreachable(const std::function<CliRun(const std::vector<std::string>&)>& run,
                                    const std::string& id, int fd) {
  std::string path = "/proc/1/fd/" + std::to_string(fd);
  CliRun looked = run({"exec", id, "--", "python3", "-c", R"(
import os, socket, sys
fd, path = sys.argv[1], sys.argv[2]
print('listed' if fd in os.listdir('/proc/1/fd') else 'not listed')
for name, call in [('readlink', lambda: os.readlink(path)),
                   ('listdir', lambda: os.listdir(path + '/')),
                   ('connect', lambda: socket.socket(socket.AF_UNIX).connect(path + '/rpc.sock')),
                   ('open', lambda: open(path + '/agent.log'))]:
    try:
        call()
        print(name, 'allowed')
    except PermissionError:
        print(name, 'denied')
)", std::to_string(fd), path});
  EXPECT_EQ(looked.out, "listed\nreadlink denied\nlistdir denied\nconnect denied\nopen denied\n") << looked.err;
}

TEST_F(CliTest, PidOnesDescriptorsCanBeListedButNotFollowed) {
  std::string id = create();
  expect_host_dir_fd_unreachable([&](const std::vector<std::string>& args) { return run(args); }, id, 5);
}

#ifndef GPUBOX_SANITIZE  // the container tests need the static agent of the default build
// Podman hands PID 1 the host-private dir as fd 3: the agent's log and exit
// record are there, not in the container's /run/gpubox, and code in the
// container cannot reach them.
TEST_F(PodmanCliTest, TheAgentsFilesForTheHostAreOutOfTheContainersReach) {
  std::string id = create();
  std::string host_dir = store_dir() + "/" + id + "/host";
  EXPECT_THAT(read_text(host_dir + "/agent.log"), HasSubstr("agent starting"));
  EXPECT_FALSE(read_text(host_dir + "/container.pid").empty());
  EXPECT_EQ(run({"exec", id, "--", "sh", "-c", "ls /run/gpubox; echo end"}).out.find("agent.log"), std::string::npos);
  expect_host_dir_fd_unreachable([&](const std::vector<std::string>& args) { return run(args); }, id, 3);
}
#endif

}  // namespace
}  // namespace gpubox::testing
