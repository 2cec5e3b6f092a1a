// agent/seccomp_filter.h through the process table, with real processes:
// tests/cli/seccomp_probe.py (Debian's /usr/bin/python3) tries calls the
// filter refuses and calls it lets through; tests/unit/seccomp_i386_probe.s
// makes i386 calls through int 0x80. Filtered, each refused call gets what
// Docker's profile gives it (EPERM; ENOSYS for clone3 and past the table);
// unfiltered, as root on the host, none does, so the filter refused them.
#include "agent/seccomp_filter.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>

#include "agent/process_table.h"
#include "base/fd.h"
#include "tests/prerequisite.h"

namespace gpubox {
namespace {

using ::testing::Contains;

// What argv printed on stdout, run as a child of a table with this filter (or none).
std::string run_captured(const SeccompSettings* settings, std::vector<std::string> argv) {
  ProcessTable table;
  if (settings) {
    auto program = build_seccomp_program(*settings);
    EXPECT_TRUE(program) << program.status().to_string();
    if (program) {
      Status set = table.set_child_filter(*program);
      EXPECT_TRUE(set) << set.to_string();
    }
  }
  int fds[2];
  EXPECT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  Fd read_end(fds[0]), write_end(fds[1]);
  SpawnOptions options;
  options.argv = std::move(argv);
  options.env = build_environment({});
  options.stdout_fd = write_end.get();
  bool exited = false;
  auto pid = table.spawn(options, [&](pid_t, ExitStatus status) {
    exited = true;
    EXPECT_TRUE(status.success()) << status.describe();
  });
  EXPECT_TRUE(pid) << pid.status().to_string();
  write_end.reset();
  std::string text;
  char buffer[4096];
  for (ssize_t n; (n = ::read(read_end.get(), buffer, sizeof buffer)) > 0;) text.append(buffer, static_cast<size_t>(n));
  while (pid && !exited) table.reap();
  return text;
}

// One line of the probe: what the call got, and what gpubox's filter should give it.
struct Attempt {
  std::string got;
  std::string expected;  // EPERM, ENOSYS or "passes" (neither)
};

std::map<std::string, Attempt> probe(const SeccompSettings* settings) {
  std::istringstream lines(run_captured(settings, {"/usr/bin/python3", GPUBOX_SECCOMP_PROBE}));
  std::map<std::string, Attempt> attempts;
  for (std::string name, got, expected; lines >> name >> got >> expected;) attempts[name] = {got, expected};
  return attempts;
}

bool refused(const std::string& got) { return got == "EPERM" || got == "ENOSYS"; }

bool kernel_at_least(int major, int minor) {
  utsname names{};
  ::uname(&names);
  int has_major = 0, has_minor = 0;
  std::sscanf(names.release, "%d.%d", &has_major, &has_minor);
  return has_major > major || (has_major == major && has_minor >= minor);
}

const std::vector<std::string> kNamespaceAttempts = {"unshare", "setns", "clone-user-namespace", "clone3"};

bool is_namespace_attempt(const std::string& name) {
  return std::find(kNamespaceAttempts.begin(), kNamespaceAttempts.end(), name) != kNamespaceAttempts.end();
}

TEST(SeccompFilter, CompilesAndNamesWhatItDenies) {
  auto program = build_seccomp_program({});
  ASSERT_TRUE(program) << program.status().to_string();
  EXPECT_GT(program->instructions.size(), 50u);
  EXPECT_LE(program->instructions.size(), static_cast<size_t>(BPF_MAXINSNS));
  auto denied = seccomp_denied_calls({});
  EXPECT_THAT(denied, Contains("bpf"));
  EXPECT_THAT(denied, Contains("io_uring_setup"));
  EXPECT_THAT(denied, Contains("unshare"));
  EXPECT_THAT(denied, Contains("clone3 (ENOSYS)"));
  EXPECT_THAT(denied, Contains("socket (but with the arguments Docker's profile allows)"));
  EXPECT_THAT(denied, Contains("every call numbered past 466 (ENOSYS)"));
  EXPECT_THAT(denied, ::testing::Not(Contains("read")));
  EXPECT_THAT(seccomp_denied_calls({.enabled = true, .allow_namespaces = true}), ::testing::Not(Contains("unshare")));
  EXPECT_TRUE(seccomp_denied_calls({.enabled = false}).empty());
}

TEST(SeccompFilter, EachCallGetsWhatDockersProfileGivesItAndOnlyBecauseOfTheFilter) {
  if (::geteuid() != 0) GPUBOX_MISSING("root: the unfiltered control run needs every capability");
  SeccompSettings settings;
  auto filtered = probe(&settings);
  auto unfiltered = probe(nullptr);
  ASSERT_GT(filtered.size(), 60u);
  ASSERT_EQ(filtered.size(), unfiltered.size());
  EXPECT_EQ(filtered["seccomp-mode"].got, "2");
  EXPECT_EQ(unfiltered["seccomp-mode"].got, "0");
  filtered.erase("seccomp-mode");
  for (const auto& [name, attempt] : filtered) {
    if (attempt.expected == "passes") {
      EXPECT_FALSE(refused(attempt.got)) << name << ": " << attempt.got;
      continue;
    }
    EXPECT_EQ(attempt.got, attempt.expected) << name;
    // The control: unfiltered the call does not get that answer. A number no
    // kernel has (syscall-1000) gets ENOSYS either way; open_tree_attr came in 6.15.
    if (name == "syscall-1000" || (name == "open_tree_attr" && !kernel_at_least(6, 15))) continue;
    EXPECT_NE(unfiltered[name].got, attempt.expected) << name << ": refused without the filter too, so this proves nothing";
  }
}

TEST(SeccompFilter, NamespacesAreAllowedWhenAsked) {
  if (::geteuid() != 0) GPUBOX_MISSING("root: the unfiltered control run needs every capability");
  SeccompSettings settings{.enabled = true, .allow_namespaces = true};
  auto attempts = probe(&settings);
  ASSERT_GT(attempts.size(), 60u);
  EXPECT_EQ(attempts["seccomp-mode"].got, "2");
  attempts.erase("seccomp-mode");
  for (const auto& [name, attempt] : attempts) {
    if (is_namespace_attempt(name) || attempt.expected == "passes") {
      EXPECT_FALSE(refused(attempt.got)) << name << ": " << attempt.got;
    } else {
      EXPECT_EQ(attempt.got, attempt.expected) << name;
    }
  }
}

// The raw results tests/unit/seccomp_i386_probe.s wrote, in its order.
std::vector<int32_t> i386_results(const SeccompSettings* settings) {
  std::string out = run_captured(settings, {GPUBOX_SECCOMP_I386_PROBE});
  std::vector<int32_t> results(out.size() / sizeof(int32_t));
  std::memcpy(results.data(), out.data(), results.size() * sizeof(int32_t));
  return results;
}

TEST(SeccompFilter, I386CallsThroughInt80AreFilteredToo) {
  if (::geteuid() != 0) GPUBOX_MISSING("root: the unfiltered control run needs every capability");
  SeccompSettings settings;
  std::vector<int32_t> filtered = i386_results(&settings);
  std::vector<int32_t> unfiltered = i386_results(nullptr);
  ASSERT_EQ(filtered.size(), 6u) << "the i386 program did not run: does the kernel have CONFIG_IA32_EMULATION?";
  ASSERT_EQ(unfiltered.size(), 6u);
  EXPECT_GT(filtered[0], 0) << "getpid, allowed";
  EXPECT_EQ(filtered[1], -EPERM) << "io_uring_setup";
  EXPECT_EQ(filtered[2], -EPERM) << "unshare(CLONE_NEWUSER)";
  EXPECT_EQ(filtered[3], -ENOSYS) << "open_tree_attr, past the table";
  EXPECT_EQ(filtered[4], -ENOSYS) << "call 1000";
  EXPECT_EQ(filtered[5], -EFAULT) << "statmount, allowed by number";
  // Unfiltered, as root: the kernel answers otherwise.
  EXPECT_NE(unfiltered[1], -EPERM);
  EXPECT_EQ(unfiltered[2], 0);
  if (kernel_at_least(6, 15)) {
    EXPECT_NE(unfiltered[3], -ENOSYS);
  }
}

}  // namespace
}  // namespace gpubox
