// gpubox kernelspec list / remove, and terminate removing the kernelspecs
// that attach to the sandbox it ends; in a JUPYTER_DATA_DIR of the test's own.
#include <filesystem>

#include <gmock/gmock.h>

#include "tests/cli/cli_fixture.h"

namespace gpubox::testing {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

class KernelspecCliTest : public CliTest {
 protected:
  std::map<std::string, std::string> jupyter() const {
    return {{"JUPYTER_DATA_DIR", scratch() + "/jupyter"}, {"JUPYTER_PATH", scratch() + "/elsewhere"}};
  }
  std::string kernels() const { return scratch() + "/jupyter/kernels"; }
};

TEST_F(KernelspecCliTest, ListShowsGpuboxKernelspecsAndRemoveDeletesOnlyThose) {
  std::string id = create({"--name", "speccy"});
  ASSERT_EQ(run({"kernelspec", "install", "--user", "--sandbox", "speccy"}, jupyter()).status, 0);
  ASSERT_EQ(run({"kernelspec", "install", "--user", "--name", "plain-gpubox"}, jupyter()).status, 0);
  fs::create_directories(scratch() + "/elsewhere/kernels/python3");  // someone else's kernel
  write_text(scratch() + "/elsewhere/kernels/python3/kernel.json", R"({"argv": ["python3", "-m", "ipykernel"]})");

  CliRun listed = run({"kernelspec", "list", "--json"}, jupyter());
  ASSERT_EQ(listed.status, 0) << listed.err;
  std::map<std::string, nlohmann::json> by_name;  // this test's: the machine's own folders may hold others
  for (const auto& spec : nlohmann::json::parse(listed.out)) {
    if (spec["dir"].get<std::string>().rfind(scratch(), 0) == 0) by_name[spec["name"]] = spec;
  }
  ASSERT_EQ(by_name.size(), 2u) << listed.out;
  EXPECT_EQ(by_name["gpubox-speccy"]["sandbox"], id);
  EXPECT_EQ(by_name["gpubox-speccy"]["sandbox_state"], "running");
  EXPECT_TRUE(by_name["plain-gpubox"]["sandbox"].is_null());
  EXPECT_THAT(run({"kernelspec", "list"}, jupyter()).out, HasSubstr("gpubox-speccy"));

  CliRun foreign = run({"kernelspec", "remove", "python3"}, jupyter());
  EXPECT_EQ(foreign.status, 2);
  EXPECT_THAT(foreign.err, HasSubstr("no gpubox kernelspec named 'python3'"));
  EXPECT_TRUE(fs::exists(scratch() + "/elsewhere/kernels/python3/kernel.json")) << "another kernel's spec is left alone";
  CliRun removed = run({"kernelspec", "remove", "plain-gpubox"}, jupyter());
  EXPECT_EQ(removed.status, 0) << removed.err;
  EXPECT_FALSE(fs::exists(kernels() + "/plain-gpubox"));
  EXPECT_EQ(run({"kernelspec", "remove", "plain-gpubox"}, jupyter()).status, 2);
  EXPECT_EQ(run({"kernelspec", "frobnicate"}, jupyter()).status, 2);
}

TEST_F(KernelspecCliTest, TerminateRemovesTheKernelspecsOfTheSandboxItEnds) {
  std::string ended = create({"--name", "ending"});
  std::string kept = create({"--name", "keeping"});
  ASSERT_EQ(run({"kernelspec", "install", "--user", "--sandbox", ended}, jupyter()).status, 0);
  ASSERT_EQ(run({"kernelspec", "install", "--user", "--sandbox", ended, "--name", "second"}, jupyter()).status, 0);
  ASSERT_EQ(run({"kernelspec", "install", "--user", "--sandbox", kept}, jupyter()).status, 0);
  CliRun terminated = run({"terminate", "ending"}, jupyter());
  ASSERT_EQ(terminated.status, 0) << terminated.err;
  EXPECT_THAT(terminated.out, HasSubstr("removed its kernelspec " + kernels() + "/gpubox-ending"));
  EXPECT_FALSE(fs::exists(kernels() + "/gpubox-ending"));
  EXPECT_FALSE(fs::exists(kernels() + "/second"));
  EXPECT_TRUE(fs::exists(kernels() + "/gpubox-keeping/kernel.json")) << "another sandbox's kernelspec stays";
}

}  // namespace
}  // namespace gpubox::testing
