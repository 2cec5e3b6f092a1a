// agent/seccomp_filter.h through the process table, with real processes:
// tests/cli/seccomp_probe.py (Debian's /usr/bin/python3) tries each denied
// call. Filtered, each gets EPERM (clone3 ENOSYS); unfiltered, as root on the
// host, none does, so the filter, not a missing capability, refused them.
#include "agent/seccomp_filter.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <sstream>

#include "agent/process_table.h"
#include "base/fd.h"
#include "tests/prerequisite.h"

namespace gpubox {
namespace {

using ::testing::Contains;

// The probe's verdicts by attempt, from a child of a table with this filter (or none).
std::map<std::string, std::string> probe(const SeccompSettings* settings) {
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
  options.argv = {"/usr/bin/python3", GPUBOX_SECCOMP_PROBE};
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
  std::map<std::string, std::string> verdicts;
  std::istringstream lines(text);
  for (std::string name, verdict; lines >> name >> verdict;) verdicts[name] = verdict;
  return verdicts;
}

const std::vector<std::string> kNamespaceAttempts = {"unshare", "setns", "clone-user-namespace", "clone3"};
const std::vector<std::string> kAlwaysAllowed = {"personality-query", "personality-linux32-uname26", "fork", "getpid"};

bool is_namespace_attempt(const std::string& name) {
  return std::find(kNamespaceAttempts.begin(), kNamespaceAttempts.end(), name) != kNamespaceAttempts.end();
}
bool is_always_allowed(const std::string& name) {
  return std::find(kAlwaysAllowed.begin(), kAlwaysAllowed.end(), name) != kAlwaysAllowed.end();
}

TEST(SeccompFilter, CompilesAndNamesWhatItDenies) {
  auto program = build_seccomp_program({});
  ASSERT_TRUE(program) << program.status().to_string();
  EXPECT_GT(program->instructions.size(), 50u);
  EXPECT_LE(program->instructions.size(), static_cast<size_t>(BPF_MAXINSNS));
  auto denied = seccomp_denied_calls({});
  EXPECT_THAT(denied, Contains("bpf"));
  EXPECT_THAT(denied, Contains("unshare"));
  EXPECT_THAT(seccomp_denied_calls({.enabled = true, .allow_namespaces = true}), ::testing::Not(Contains("unshare")));
  EXPECT_TRUE(seccomp_denied_calls({.enabled = false}).empty());
}

TEST(SeccompFilter, EveryDeniedCallGetsEpermAndOnlyBecauseOfTheFilter) {
  if (::geteuid() != 0) GPUBOX_MISSING("root: the unfiltered control run needs every capability");
  SeccompSettings settings;
  auto filtered = probe(&settings);
  auto unfiltered = probe(nullptr);
  ASSERT_GT(filtered.size(), 50u);
  ASSERT_EQ(filtered.size(), unfiltered.size());
  EXPECT_EQ(filtered["seccomp-mode"], "2");
  EXPECT_EQ(unfiltered["seccomp-mode"], "0");
  for (const auto& [name, verdict] : filtered) {
    if (name == "seccomp-mode") continue;
    if (is_always_allowed(name)) {
      EXPECT_EQ(verdict, "allowed") << name;
      continue;
    }
    EXPECT_EQ(verdict, name == "clone3" ? "ENOSYS" : "EPERM") << name;
    EXPECT_NE(unfiltered[name], "EPERM") << name << ": refused without the filter too, so this proves nothing";
  }
}

TEST(SeccompFilter, NamespacesAreAllowedWhenAsked) {
  if (::geteuid() != 0) GPUBOX_MISSING("root: the unfiltered control run needs every capability");
  SeccompSettings settings{.enabled = true, .allow_namespaces = true};
  auto verdicts = probe(&settings);
  ASSERT_GT(verdicts.size(), 50u);
  for (const auto& [name, verdict] : verdicts) {
    if (name == "seccomp-mode") {
      EXPECT_EQ(verdict, "2");
    } else if (is_namespace_attempt(name)) {
      EXPECT_NE(verdict, "EPERM") << name;
      EXPECT_NE(verdict, "ENOSYS") << name;
    } else if (!is_always_allowed(name)) {
      EXPECT_EQ(verdict, "EPERM") << name;
    }
  }
}

}  // namespace
}  // namespace gpubox
