// The host trusts nothing sandbox code can write (docs/security.md, "What
// the host reads"): code in a local sandbox, root inside, can neither replace
// the RPC socket the host talks to, nor plant a link or FIFO where the host
// reads the agent's log and exit record, nor see other sandboxes' cgroups or
// the container engines' storage, nor go through PID 1's descriptors.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
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

TEST_F(CliTest, ALinkOrFifoPlantedAsTheAgentsLogIsNotWhatTheHostReads) {
  std::string id = create();
  // A host file the sandbox cannot see (its /tmp is its own).
  write_text(scratch() + "/host-only.txt", "host-only-content-1f3c\n");
  CliRun planted = run({"exec", id, "--", "sh", "-c",
                        "test ! -e " + scratch() + "/host-only.txt && rm -f /run/gpubox/agent.log && "
                        "ln -s " + scratch() + "/host-only.txt /run/gpubox/agent.log && echo planted"});
  ASSERT_EQ(planted.out, "planted\n") << planted.err;
  CliRun logs = run({"logs", id});
  EXPECT_EQ(logs.status, 0) << logs.err;
  EXPECT_THAT(logs.out, Not(HasSubstr("host-only-content")));
  EXPECT_THAT(logs.out, HasSubstr("agent starting"));

  CliRun fifo = run({"exec", id, "--", "sh", "-c", "rm -f /run/gpubox/agent.log && mkfifo /run/gpubox/agent.log && echo fifo"});
  ASSERT_EQ(fifo.out, "fifo\n") << fifo.err;
  auto began = Clock::now();
  logs = run({"logs", id});
  EXPECT_EQ(logs.status, 0) << logs.err;
  EXPECT_THAT(logs.out, HasSubstr("agent starting"));
  EXPECT_LT(Clock::now() - began, std::chrono::seconds(20));
}

TEST_F(CliTest, AForgedExitRecordIsNotHowTheSandboxEnded) {
  std::string id = create();
  write_text(scratch() + "/fake-exit.txt", "{\"reason\": \"shutdown\", \"detail\": \"link\", \"exit_code\": 0}\n");
  CliRun forged = run({"exec", id, "--", "sh", "-c",
                       "echo '{\"reason\": \"shutdown\", \"detail\": \"forged\", \"exit_code\": 0}' > /run/gpubox/exit.json && echo forged"});
  ASSERT_EQ(forged.out, "forged\n") << forged.err;
  pid_t agent = record(id)["agent_pid"].get<pid_t>();
  ASSERT_EQ(::kill(agent, SIGKILL), 0);
  for (int i = 0; i < 500; ++i) {
    std::string stat = read_text("/proc/" + std::to_string(agent) + "/stat");
    if (stat.empty() || stat.find(") Z") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  auto info = nlohmann::json::parse(run({"ls", "--json"}).out);
  ASSERT_EQ(info.size(), 1u);
  EXPECT_EQ(info[0]["state"], "dead");
  EXPECT_EQ(info[0]["ended"]["reason"], "agent_crashed") << info.dump();
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

TEST_F(CliTest, PidOnesDescriptorsCanBeListedButNotFollowed) {
  std::string id = create();
  // What docs/security.md says holds: the numbers are listed, nothing is reached through them.
  CliRun looked = run({"exec", id, "--", "python3", "-c", R"(
import os, socket
print('listed' if '5' in os.listdir('/proc/1/fd') else 'not listed')
for name, call in [('readlink', lambda: os.readlink('/proc/1/fd/5')),
                   ('listdir', lambda: os.listdir('/proc/1/fd/5/')),
                   ('connect', lambda: socket.socket(socket.AF_UNIX).connect('/proc/1/fd/5/rpc.sock')),
                   ('open', lambda: open('/proc/1/fd/5/agent.log'))]:
    try:
        call()
        print(name, 'allowed')
    except PermissionError:
        print(name, 'denied')
)"});
  EXPECT_EQ(looked.out, "listed\nreadlink denied\nlistdir denied\nconnect denied\nopen denied\n") << looked.err;
}

}  // namespace
}  // namespace gpubox::testing
