// agent/process_table.h with real processes: exit statuses routed to their
// callbacks, exec failures as errors, the child's environment, signal mask
// and process group, and no lost status when spawns and reaps race.
#include "agent/process_table.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "base/fd.h"
#include "tests/unit/temp_dir.h"
#include "base/thread_annotations.h"

namespace gpubox {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct Pipe {
  Pipe() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) ADD_FAILURE() << "pipe2";
    read_end.reset(fds[0]);
    write_end.reset(fds[1]);
  }
  Fd read_end;
  Fd write_end;
};

// Everything until EOF.
std::string read_all(int fd) {
  std::string text;
  char buffer[4096];
  while (true) {
    ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return text;
    text.append(buffer, static_cast<size_t>(n));
  }
}

// One line, without waiting for EOF.
std::string read_line(int fd) {
  std::string text;
  char c;
  while (true) {
    ssize_t n = ::read(fd, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || c == '\n') return text;
    text.push_back(c);
  }
}

// Blocks until pid has exited, without reaping it: reap() must still find it.
void wait_until_exited(pid_t pid) {
  siginfo_t info{};
  int rc;
  do {
    rc = ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) ADD_FAILURE() << "waitid(" << pid << "): " << std::strerror(errno);
}

struct Exit {
  int calls = 0;
  pid_t pid = 0;
  ExitStatus status;
  ProcessLauncher::ExitCallback callback() {
    return [this](pid_t reaped, ExitStatus exit_status) {
      ++calls;
      pid = reaped;
      status = exit_status;
    };
  }
};

SpawnOptions command(std::vector<std::string> argv) {
  SpawnOptions options;
  options.argv = std::move(argv);
  options.env = build_environment({});
  return options;
}

TEST(ExitStatus, FromWaitStatus) {
  ExitStatus three = ExitStatus::from_wait_status(3 << 8);
  EXPECT_EQ(three.code, 3);
  EXPECT_EQ(three.signal, 0);
  EXPECT_FALSE(three.success());
  EXPECT_EQ(three.shell_code(), 3);
  EXPECT_EQ(three.describe(), "exited with code 3");
  EXPECT_TRUE(ExitStatus::from_wait_status(0).success());

  ExitStatus segv = ExitStatus::from_wait_status(SIGSEGV | 0x80);
  EXPECT_EQ(segv.signal, SIGSEGV);
  EXPECT_TRUE(segv.core_dumped);
  EXPECT_FALSE(segv.success());
  EXPECT_EQ(segv.shell_code(), 128 + SIGSEGV);
  EXPECT_EQ(segv.describe(), "killed by SIGSEGV (core dumped)");
  EXPECT_EQ(ExitStatus::from_wait_status(SIGKILL).describe(), "killed by SIGKILL");
}

TEST(ProcessTable, ReportsTheExitCodeAfterReap) {
  ProcessTable table;
  Exit exit;
  auto pid = table.spawn(command({"/bin/sh", "-c", "exit 7"}), exit.callback());
  ASSERT_TRUE(pid) << pid.status().to_string();
  EXPECT_THAT(table.live_pids(), ElementsAre(*pid));
  wait_until_exited(*pid);
  EXPECT_EQ(exit.calls, 0) << "the callback runs from reap(), not before";
  EXPECT_EQ(table.reap(), 1);
  EXPECT_EQ(exit.calls, 1);
  EXPECT_EQ(exit.pid, *pid);
  EXPECT_EQ(exit.status.code, 7);
  EXPECT_EQ(exit.status.signal, 0);
  EXPECT_TRUE(table.live_pids().empty());
  EXPECT_EQ(table.reap(), 0);
  EXPECT_EQ(exit.calls, 1);
}

TEST(ProcessTable, ReportsTheSignalThatKilledTheChild) {
  ProcessTable table;
  Pipe input;  // cat blocks reading it until killed
  Exit exit;
  SpawnOptions options = command({"/bin/cat"});
  options.stdin_fd = input.read_end.get();
  auto pid = table.spawn(options, exit.callback());
  ASSERT_TRUE(pid) << pid.status().to_string();
  EXPECT_TRUE(table.signal_group(*pid, SIGTERM));
  wait_until_exited(*pid);
  EXPECT_EQ(table.reap(), 1);
  ASSERT_EQ(exit.calls, 1);
  EXPECT_EQ(exit.status.signal, SIGTERM);
  EXPECT_EQ(exit.status.shell_code(), 128 + SIGTERM);
  EXPECT_EQ(exit.status.describe(), "killed by SIGTERM");
  EXPECT_FALSE(table.signal_group(*pid, 0)) << "the group is gone";
  EXPECT_FALSE(table.signal_group(0, SIGTERM)) << "pgid 0 would be our own group";
  EXPECT_FALSE(table.signal_group(-1, SIGTERM));
}

TEST(ProcessTable, MissingProgramIsNotFoundAndLeavesNoChild) {
  ProcessTable table;
  Exit exit;
  auto by_path = table.spawn(command({"/nonexistent/gpubox-no-such-program"}), exit.callback());
  ASSERT_FALSE(by_path);
  EXPECT_EQ(by_path.status().code(), ErrorCode::not_found);
  EXPECT_THAT(by_path.status().message(), HasSubstr("cannot run '/nonexistent/gpubox-no-such-program'"));
  auto by_name = table.spawn(command({"gpubox-no-such-program-xyz"}), exit.callback());
  ASSERT_FALSE(by_name);
  EXPECT_EQ(by_name.status().code(), ErrorCode::not_found);

  EXPECT_TRUE(table.live_pids().empty());
  EXPECT_EQ(table.reap(), 0) << "a failed exec left a zombie";
  EXPECT_FALSE(table.has_children());
  EXPECT_EQ(exit.calls, 0);
}

TEST(ProcessTable, MissingCwdNamesTheDirectory) {
  ProcessTable table;
  Exit exit;
  SpawnOptions options = command({"/bin/true"});
  options.cwd = "/nonexistent-gpubox-dir";
  auto pid = table.spawn(options, exit.callback());
  ASSERT_FALSE(pid);
  EXPECT_EQ(pid.status().code(), ErrorCode::not_found);
  EXPECT_THAT(pid.status().message(), HasSubstr("'/nonexistent-gpubox-dir'"));
  EXPECT_EQ(table.reap(), 0);
  EXPECT_EQ(exit.calls, 0);
}

TEST(ProcessTable, NonExecutableFileIsPermissionDenied) {
  test::TempDir dir;
  std::string script = dir.write("script.sh", "#!/bin/sh\nexit 0\n");
  ASSERT_EQ(::chmod(script.c_str(), 0644), 0);
  ProcessTable table;
  Exit exit;
  auto pid = table.spawn(command({script}), exit.callback());
  ASSERT_FALSE(pid);
  EXPECT_EQ(pid.status().code(), ErrorCode::permission_denied);
  EXPECT_THAT(pid.status().message(), HasSubstr("cannot run '" + script + "'"));
  auto directory = table.spawn(command({dir.path()}), exit.callback());
  ASSERT_FALSE(directory);
  EXPECT_EQ(directory.status().code(), ErrorCode::permission_denied);
  EXPECT_EQ(table.reap(), 0);
  EXPECT_EQ(exit.calls, 0);
}

TEST(ProcessTable, EmptyArgvIsInvalid) {
  ProcessTable table;
  EXPECT_EQ(table.spawn(SpawnOptions{}, nullptr).status().code(), ErrorCode::invalid_request);
  EXPECT_EQ(table.spawn(command({""}), nullptr).status().code(), ErrorCode::invalid_request);
}

TEST(ProcessTable, CwdEnvAndStdioAreApplied) {
  test::TempDir dir;
  ProcessTable table;
  Pipe out;
  Pipe err;
  Exit exit;
  SpawnOptions options;
  options.argv = {"sh", "-c", R"(pwd; echo "$GPUBOX_UNIT_VAR"; echo "${HOME-unset}"; echo oops >&2)"};
  options.env = {"GPUBOX_UNIT_VAR=hello world", "PATH=/usr/bin:/bin"};
  options.cwd = dir.path();
  options.stdout_fd = out.write_end.get();
  options.stderr_fd = err.write_end.get();
  auto pid = table.spawn(options, exit.callback());
  ASSERT_TRUE(pid) << pid.status().to_string();
  out.write_end.reset();
  err.write_end.reset();
  std::string stdout_text = read_all(out.read_end.get());
  std::string stderr_text = read_all(err.read_end.get());
  wait_until_exited(*pid);
  EXPECT_EQ(table.reap(), 1);
  EXPECT_EQ(exit.status.code, 0);
  // The environment is exactly the one given: no HOME inherited from us.
  EXPECT_EQ(stdout_text, std::filesystem::canonical(dir.path()).string() + "\nhello world\nunset\n");
  EXPECT_EQ(stderr_text, "oops\n");
}

std::string status_field(const std::string& status_text, const std::string& field) {
  auto at = status_text.find("\n" + field + ":\t");
  if (at == std::string::npos) return "<missing " + field + ">";
  at += field.size() + 3;
  return status_text.substr(at, status_text.find('\n', at) - at);
}

// The bits of signals 1 to 31 in a /proc status mask.
unsigned long long standard_signals(const std::string& hex_mask) {
  return std::strtoull(hex_mask.c_str(), nullptr, 16) & 0x7fffffffULL;
}

TEST(ProcessTable, ChildGetsAnEmptySignalMaskAndDefaultDispositions) {
  sigset_t blocked, saved_mask;
  sigemptyset(&blocked);
  for (int sig : {SIGTERM, SIGINT, SIGUSR1, SIGCHLD, SIGHUP}) sigaddset(&blocked, sig);
  ASSERT_EQ(::pthread_sigmask(SIG_BLOCK, &blocked, &saved_mask), 0);
  struct sigaction ignore {}, saved_usr2 {};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(::sigaction(SIGUSR2, &ignore, &saved_usr2), 0);

  std::string parent_status = test::TempDir::read("/proc/thread-self/status");
  ProcessTable table;
  Pipe out;
  Exit exit;
  SpawnOptions options = command({"/bin/cat", "/proc/self/status"});
  options.stdout_fd = out.write_end.get();
  auto pid = table.spawn(options, exit.callback());

  ::sigaction(SIGUSR2, &saved_usr2, nullptr);
  ::pthread_sigmask(SIG_SETMASK, &saved_mask, nullptr);
  ASSERT_TRUE(pid) << pid.status().to_string();
  out.write_end.reset();
  std::string child_status = read_all(out.read_end.get());
  wait_until_exited(*pid);
  EXPECT_EQ(table.reap(), 1);

  // The parent really did block and ignore signals, so the child's zeros mean something.
  ASSERT_NE(status_field(parent_status, "SigBlk"), "0000000000000000");
  ASSERT_NE(standard_signals(status_field(parent_status, "SigIgn")), 0u);
  EXPECT_EQ(status_field(child_status, "SigBlk"), "0000000000000000");
  // Signals 1-31 only: glibc's posix_spawn leaves its own internal signals
  // (32 and 33, below SIGRTMIN) ignored in the child; glibc children reinstall them.
  EXPECT_EQ(standard_signals(status_field(child_status, "SigIgn")), 0u) << status_field(child_status, "SigIgn");
}

TEST(ProcessTable, ChildIsInItsOwnProcessGroup) {
  ProcessTable table;
  Pipe input;
  Exit group_exit, session_exit;
  SpawnOptions options = command({"/bin/cat"});
  options.stdin_fd = input.read_end.get();
  auto in_group = table.spawn(options, group_exit.callback());
  ASSERT_TRUE(in_group) << in_group.status().to_string();
  options.new_session = true;
  auto in_session = table.spawn(options, session_exit.callback());
  ASSERT_TRUE(in_session) << in_session.status().to_string();

  EXPECT_EQ(::getpgid(*in_group), *in_group);
  EXPECT_NE(::getpgid(*in_group), ::getpgid(0));
  EXPECT_EQ(::getsid(*in_group), ::getsid(0)) << "setpgid, not setsid, without new_session";
  EXPECT_EQ(::getsid(*in_session), *in_session);
  EXPECT_EQ(::getpgid(*in_session), *in_session);

  input.write_end.reset();  // EOF: both cats exit 0
  wait_until_exited(*in_group);
  wait_until_exited(*in_session);
  EXPECT_EQ(table.reap(), 2);
  EXPECT_EQ(group_exit.calls, 1);
  EXPECT_EQ(group_exit.status.code, 0);
  EXPECT_EQ(session_exit.calls, 1);
  EXPECT_EQ(session_exit.pid, *in_session);
}

TEST(ProcessTable, SignalGroupReachesGrandchildrenAndReapTakesOrphans) {
  // As a subreaper, orphaned grandchildren become ours, as they would be PID 1's.
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  ProcessTable table;
  Pipe out;
  Exit exit;
  SpawnOptions options = command({"/bin/sh", "-c", "sleep 1000 >/dev/null & echo $!; wait"});
  options.stdout_fd = out.write_end.get();
  auto pid = table.spawn(options, exit.callback());
  ASSERT_TRUE(pid) << pid.status().to_string();
  out.write_end.reset();
  std::string line = read_line(out.read_end.get());
  pid_t grandchild = std::atoi(line.c_str());
  ASSERT_GT(grandchild, 0) << line;
  EXPECT_EQ(::getpgid(grandchild), *pid) << "the grandchild is in the child's group";
  ASSERT_TRUE(table.signal_group(*pid, SIGKILL));

  wait_until_exited(*pid);
  wait_until_exited(grandchild);  // reparented to us once sh died
  EXPECT_EQ(table.reap(), 2);
  EXPECT_EQ(exit.calls, 1);
  EXPECT_EQ(exit.pid, *pid);
  EXPECT_EQ(exit.status.signal, SIGKILL);
  EXPECT_EQ(::kill(grandchild, 0), -1) << "the grandchild survived the group KILL";
  EXPECT_FALSE(table.has_children());
  ::prctl(PR_SET_CHILD_SUBREAPER, 0);
}

TEST(ProcessTable, HasChildrenTurnsFalseOnceAllAreReaped) {
  ProcessTable table;
  Exit first, second;
  auto one = table.spawn(command({"/bin/true"}), first.callback());
  ASSERT_TRUE(one);
  auto two = table.spawn(command({"/bin/false"}), second.callback());
  ASSERT_TRUE(two);
  wait_until_exited(*one);
  EXPECT_TRUE(table.has_children());
  wait_until_exited(*two);
  EXPECT_EQ(table.reap(), 2);
  EXPECT_FALSE(table.has_children());
  EXPECT_EQ(first.status.code, 0);
  EXPECT_EQ(second.status.code, 1);

  auto three = table.spawn(command({"/bin/true"}), first.callback());
  ASSERT_TRUE(three);
  EXPECT_TRUE(table.has_children());
  wait_until_exited(*three);
  EXPECT_EQ(table.reap(), 1);
  EXPECT_FALSE(table.has_children());
  EXPECT_EQ(first.calls, 2);
}

TEST(ProcessTable, ConcurrentSpawnsAndReapsLoseNoStatus) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 50;
  constexpr int kTotal = kThreads * kPerThread;
  ProcessTable table;
  Mutex mutex;  // locals cannot be GUARDED_BY: the three maps below are under it
  std::map<pid_t, int> expected;       // guarded by mutex
  std::map<pid_t, int> reported;       // guarded by mutex
  std::map<pid_t, int> callbacks;      // guarded by mutex
  std::atomic<int> reported_count{0};
  std::atomic<int> spawners_left{kThreads};
  std::atomic<int> spawn_failures{0};

  std::thread reaper([&] {
    while (reported_count.load() < kTotal) {
      siginfo_t info{};
      // Sleeps in the kernel until some child has exited; reaps nothing itself.
      int rc = ::waitid(P_ALL, 0, &info, WEXITED | WNOWAIT);
      if (rc != 0 && errno == ECHILD) {
        if (spawners_left.load() == 0) break;  // every child is gone: a status was lost
        std::this_thread::yield();
      }
      table.reap();
    }
  });

  std::vector<std::thread> spawners;
  for (int t = 0; t < kThreads; ++t) {
    spawners.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        int code = (t * kPerThread + i) % 256;
        auto pid = table.spawn(command({"/bin/sh", "-c", "exit " + std::to_string(code)}),
                               [&](pid_t reaped, ExitStatus status) {
                                 MutexLock lock(mutex);
                                 reported[reaped] = status.code;
                                 ++callbacks[reaped];
                                 ++reported_count;
                               });
        if (!pid) {
          ++spawn_failures;
          continue;
        }
        MutexLock lock(mutex);
        expected[*pid] = code;
      }
      --spawners_left;
    });
  }
  for (auto& spawner : spawners) spawner.join();
  reaper.join();

  EXPECT_EQ(spawn_failures.load(), 0);
  EXPECT_EQ(reported_count.load(), kTotal);
  EXPECT_EQ(reported, expected);
  for (const auto& [pid, count] : callbacks) EXPECT_EQ(count, 1) << "pid " << pid;
  EXPECT_TRUE(table.live_pids().empty());
  table.reap();
  EXPECT_FALSE(table.has_children());
}

TEST(BuildEnvironment, OverridesReplaceAndRemoveDrops) {
  ::setenv("GPUBOX_UNIT_OVERRIDDEN", "old", 1);
  ::setenv("GPUBOX_UNIT_REMOVED", "secret", 1);
  ::setenv("GPUBOX_UNIT_KEPT", "kept", 1);
  std::vector<std::string> env = build_environment(
      {{"GPUBOX_UNIT_OVERRIDDEN", "new"}, {"GPUBOX_UNIT_ADDED", "a=b"}, {"GPUBOX_UNIT_TWICE", "first"},
       {"GPUBOX_UNIT_TWICE", "second"}},
      {"GPUBOX_UNIT_REMOVED"});
  ::unsetenv("GPUBOX_UNIT_OVERRIDDEN");
  ::unsetenv("GPUBOX_UNIT_REMOVED");
  ::unsetenv("GPUBOX_UNIT_KEPT");

  std::vector<std::string> ours;
  for (const auto& entry : env) {
    if (entry.rfind("GPUBOX_UNIT_", 0) == 0) ours.push_back(entry);
  }
  std::sort(ours.begin(), ours.end());
  // One entry per name; the last override of a name wins.
  EXPECT_THAT(ours, ElementsAre("GPUBOX_UNIT_ADDED=a=b", "GPUBOX_UNIT_KEPT=kept", "GPUBOX_UNIT_OVERRIDDEN=new",
                                "GPUBOX_UNIT_TWICE=second"));
}

}  // namespace
}  // namespace gpubox
