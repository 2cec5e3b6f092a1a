// host/cli/cli.h: option parsing, numbers and remote paths shared by the commands.
#include "host/cli/cli.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "host/backends/container/container_backend.h"
#include "host/resource_limits.h"

namespace gpubox::host::cli {
namespace {

using ::testing::ElementsAre;

TEST(CliArgs, OptionsValuesFlagsAndTheCommand) {
  auto args = parse_args({"box", "--env", "A=1", "--env=B=2", "--cwd", "/x", "--json", "--", "sh", "-c", "--env"},
                         {"--env", "--cwd"}, {});
  ASSERT_TRUE(args) << args.status().to_string();
  EXPECT_THAT(args->positional, ElementsAre("box"));
  EXPECT_THAT(args->all("--env"), ElementsAre("A=1", "B=2"));
  EXPECT_EQ(args->last("--cwd"), "/x");
  EXPECT_TRUE(args->flag("--json"));
  EXPECT_TRUE(args->has_double_dash);
  EXPECT_THAT(args->command, ElementsAre("sh", "-c", "--env"));
}

TEST(CliArgs, StopAfterStartsTheCommandAtTheNextPositional) {
  auto args = parse_args({"box", "--cwd", "/x", "ls", "-l", "--cwd"}, {"--cwd"}, {}, 1);
  ASSERT_TRUE(args);
  EXPECT_THAT(args->positional, ElementsAre("box"));
  EXPECT_THAT(args->command, ElementsAre("ls", "-l", "--cwd"));
  EXPECT_EQ(args->last("--cwd"), "/x");
}

TEST(CliArgs, ErrorsNameTheArgument) {
  EXPECT_EQ(parse_args({"--bogus"}, {}, {}).status().message(), "--bogus: unknown option");
  EXPECT_EQ(parse_args({"--cwd"}, {"--cwd"}, {}).status().message(), "--cwd: expected a value");
  EXPECT_EQ(parse_args({"--all=1"}, {}, {"--all"}).status().message(), "--all: takes no value");
  EXPECT_TRUE(parse_args({"-h"}, {}, {})->flag("--help"));
}

TEST(CliArgs, NumbersMustBeWholeAndInRange) {
  EXPECT_EQ(parse_number("1.5", 0, 2), 1.5);
  EXPECT_FALSE(parse_number("3", 0, 2));
  EXPECT_FALSE(parse_number("1x", 0, 2));
  EXPECT_FALSE(parse_number("nan", 0, 2));
  EXPECT_FALSE(parse_number("", 0, 2));
}

TEST(CliArgs, RelativeRemotePathsAreUnderTheWorkDir) {
  EXPECT_EQ(remote_path("/etc/x"), "/etc/x");
  EXPECT_EQ(remote_path("x/y"), "/workspace/x/y");
  EXPECT_EQ(remote_path("./x"), "/workspace/x");
  EXPECT_EQ(remote_path("."), "/workspace");
}

TEST(CliArgs, ExitCodesForStatuses) {
  EXPECT_EQ(exit_code_for(Status(ErrorCode::not_found, "")), kExitUsage);
  EXPECT_EQ(exit_code_for(Status(ErrorCode::invalid_request, "")), kExitUsage);
  EXPECT_EQ(exit_code_for(Status(ErrorCode::unavailable, "")), kExitUnreachable);
  EXPECT_EQ(exit_code_for(Status(ErrorCode::internal, "")), kExitFailed);
}

TEST(LimitPlan, SurvivesItsRecordAndReportsUnknownOomCounts) {
  LimitPlan plan;
  plan.cgroup_dirs = {"/sys/fs/cgroup/memory/gpubox-x"};
  plan.procs_files = {"/sys/fs/cgroup/memory/gpubox-x/cgroup.procs"};
  plan.enforced_by = {{"memory", "cgroup v1"}};
  plan.memory_cgroup = "/nonexistent/gpubox-x";
  plan.memory_version = "v1";
  LimitPlan back = LimitPlan::from_json(plan.to_json());
  EXPECT_EQ(back.cgroup_dirs, plan.cgroup_dirs);
  EXPECT_EQ(back.procs_files, plan.procs_files);
  EXPECT_EQ(back.enforced_by, plan.enforced_by);
  EXPECT_EQ(back.memory_cgroup, plan.memory_cgroup);
  EXPECT_EQ(oom_kill_count(back), -1);
  EXPECT_EQ(memory_usage_bytes(LimitPlan{}), -1);
  EXPECT_TRUE(LimitPlan::from_json(nlohmann::json("garbage")).cgroup_dirs.empty());
}

// --gpu of the podman and docker backends: what the engine is asked for, and what is refused first.
TEST(ContainerGpus, PodmanNamesCdiDevicesAndDockerCountsGpus) {
  EXPECT_THAT(gpu_arguments("podman", ""), ElementsAre());
  EXPECT_THAT(gpu_arguments("podman", "all"), ElementsAre("--device", "nvidia.com/gpu=all"));
  EXPECT_THAT(gpu_arguments("podman", "2"), ElementsAre("--device", "nvidia.com/gpu=0", "--device", "nvidia.com/gpu=1"));
  EXPECT_THAT(gpu_arguments("docker", "all"), ElementsAre("--gpus", "all"));
  EXPECT_THAT(gpu_arguments("docker", "3"), ElementsAre("--gpus", "3"));
  EXPECT_THAT(gpu_arguments("docker", ""), ElementsAre());
}

TEST(ContainerGpus, BadCountsAreRefusedNamingTheFlag) {
  for (const char* gpu : {"0", "65", "1.5", "-1", "two", "0,1", ""}) {
    auto args = parse_args({"--gpu", gpu}, {"--gpu"}, {});
    ASSERT_TRUE(args) << gpu;
    ContainerSandboxSpec spec;
    Status parsed = parse_container_flags(*args, true, &spec);
    EXPECT_FALSE(parsed) << gpu;
    EXPECT_THAT(parsed.message(), ::testing::HasSubstr("--gpu: expected all or a number of GPUs from 1 to 64")) << gpu;
    EXPECT_EQ(spec.gpus, "") << "nothing is changed by a refused flag";
  }
  for (const char* gpu : {"all", "1", "64"}) {
    auto args = parse_args({"--gpu", gpu}, {"--gpu"}, {});
    ContainerSandboxSpec spec;
    EXPECT_TRUE(parse_container_flags(*args, true, &spec)) << gpu;
    EXPECT_EQ(spec.gpus, gpu);
  }
}

}  // namespace
}  // namespace gpubox::host::cli
