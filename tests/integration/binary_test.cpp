// The shipped binary itself: statically linked, so it runs alone in an empty
// root with no libc, loader or /proc.
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>

#include "base/version.h"
#include "tests/integration/integration_test.h"

namespace gpubox::testing {
namespace {

using Binary = IntegrationTest;

struct CommandOutput {
  std::string text;  // stdout and stderr together
  int status = -1;   // shell status
};

CommandOutput run_command(const std::string& command) {
  CommandOutput out;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return out;
  char buffer[512];
  while (size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) out.text.append(buffer, n);
  out.status = shell_status(::pclose(pipe));
  return out;
}

#ifdef GPUBOX_SANITIZE
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

TEST_F(Binary, IsStaticallyLinked) {
  if (kSanitized) GTEST_SKIP() << "sanitizer builds link the sanitizer runtimes dynamically";
  CommandOutput file = run_command("file -L '" + agent_path() + "'");
  ASSERT_EQ(file.status, 0) << file.text;
  EXPECT_TRUE(file.text.find("statically linked") != std::string::npos ||
              file.text.find("static-pie linked") != std::string::npos)
      << file.text;
  EXPECT_EQ(file.text.find("dynamically linked"), std::string::npos) << file.text;
  EXPECT_EQ(file.text.find("interpreter"), std::string::npos) << file.text;
}

TEST_F(Binary, RunsAloneInAnEmptyChroot) {
  if (kSanitized) GTEST_SKIP() << "sanitizer builds are not static";
  std::string root = make_temp_dir("gpubox-it-chroot");
  std::filesystem::copy_file(agent_path(), root + "/gpubox-agent");
  ASSERT_EQ(std::distance(std::filesystem::directory_iterator(root), std::filesystem::directory_iterator{}), 1)
      << "the root holds the agent and nothing else";
  CommandOutput version = run_command("chroot '" + root + "' /gpubox-agent --version");
  EXPECT_EQ(version.status, 0) << version.text;
  EXPECT_EQ(version.text.rfind(std::string("gpubox-agent ") + kVersion, 0), 0u) << version.text;
  EXPECT_EQ(count_lines(version.text), 1) << version.text;

  // And it runs as an init there: a main command cannot exist in the empty
  // root, so the agent starts, reports 127 naming it and exits.
  CommandOutput missing = run_command("chroot '" + root + "' /gpubox-agent --state-dir /state -- /bin/true");
  EXPECT_EQ(missing.status, 127) << missing.text;
  EXPECT_NE(missing.text.find("/bin/true"), std::string::npos) << missing.text;
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace gpubox::testing
