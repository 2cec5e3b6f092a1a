// The plans made before a local sandbox exists: which GPU files --gpu binds
// (from a fake /dev and ldconfig output) and which subordinate ids --userns
// maps (from fake /etc/subuid and /etc/subgid).
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>

#include "host/backends/local/gpu_devices.h"
#include "host/backends/local/user_namespace.h"

namespace gpubox::host {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

class FakeHost : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/gpubox-fake-host-XXXXXX";
    dir_ = ::mkdtemp(pattern);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void touch(const std::string& name, const std::string& text = "") { std::ofstream(dir_ + "/" + name) << text; }
  std::string dir_;
};

TEST_F(FakeHost, GpuPlanBindsTheChosenNodesAndNumbersThemFromZero) {
  for (const char* node : {"nvidiactl", "nvidia-uvm", "nvidia0", "nvidia1", "nvidia2"}) touch(node);
  auto all = plan_gpus("all", dir_);
  ASSERT_TRUE(all.is_ok()) << all.status().message();
  EXPECT_THAT(all->indices, ElementsAre(0, 1, 2));
  EXPECT_EQ(all->env.at("CUDA_VISIBLE_DEVICES"), "0,1,2");
  auto two = plan_gpus("2,1,2", dir_);
  ASSERT_TRUE(two.is_ok());
  EXPECT_THAT(two->indices, ElementsAre(1, 2));
  EXPECT_THAT(two->device_nodes, ElementsAre(dir_ + "/nvidiactl", dir_ + "/nvidia-uvm", dir_ + "/nvidia1", dir_ + "/nvidia2"));
  EXPECT_EQ(two->env.at("NVIDIA_VISIBLE_DEVICES"), "1,2");
  EXPECT_EQ(two->env.at("CUDA_VISIBLE_DEVICES"), "0,1");
  auto missing = plan_gpus("3", dir_);
  ASSERT_FALSE(missing.is_ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("GPU 3 is not on this host (it has 0,1,2)"));
  for (const char* bad : {"", "al", "0,", "-1", "0;1", "1,,2"}) {
    auto refused = plan_gpus(bad, dir_);
    ASSERT_FALSE(refused.is_ok()) << bad;
    EXPECT_THAT(refused.status().message(), HasSubstr("--gpu: expected all or GPU numbers")) << bad;
  }
}

TEST_F(FakeHost, GpuPlanWithoutNvidiaDevicesSaysSo) {
  touch("null");
  auto none = plan_gpus("all", dir_);
  ASSERT_FALSE(none.is_ok());
  EXPECT_EQ(none.status().code(), ErrorCode::invalid_request);
  EXPECT_THAT(none.status().message(), HasSubstr("this host has no NVIDIA GPU"));
  touch("nvidia0");  // a GPU node without nvidiactl is no usable driver either
  EXPECT_FALSE(plan_gpus("0", dir_).is_ok());
}

TEST(DriverLibraries, OnlyTheDriversComputeLibrariesFromLdconfig) {
  std::string output =
      "1234 libs found in cache `/etc/ld.so.cache'\n"
      "\tlibnvidia-ml.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1\n"
      "\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1\n"
      "\tlibcuda.so (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so\n"
      "\tlibcudart.so.12 (libc6,x86-64) => /usr/local/cuda/lib64/libcudart.so.12\n"
      "\tlibnvidia-ptxjitcompiler.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so.1\n"
      "\tlibc.so.6 (libc6,x86-64, OS ABI: Linux 3.2.0) => /lib/x86_64-linux-gnu/libc.so.6\n";
  EXPECT_THAT(driver_libraries_in(output),
              ElementsAre("/usr/lib/x86_64-linux-gnu/libcuda.so", "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
                          "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
                          "/usr/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so.1"));
}

TEST_F(FakeHost, SubordinateRangeIsRootsLineElseTheDefault) {
  IdRange fallback = subordinate_range(dir_ + "/none", dir_ + "/none");
  EXPECT_EQ(fallback.uid_map(), "0 100000 65536\n");
  touch("subuid", "alice:100000:65536\nroot:231072:65536\n");
  touch("subgid", "root:300000:70000\n");
  IdRange found = subordinate_range(dir_ + "/subuid", dir_ + "/subgid");
  EXPECT_EQ(found.uid_map(), "0 231072 65536\n");
  EXPECT_EQ(found.gid_map(), "0 300000 65536\n");
  touch("bad", "root:0:65536\nroot:abc:1\n");
  EXPECT_EQ(subordinate_range(dir_ + "/bad", dir_ + "/bad").host_uid, 100000u);
}

}  // namespace
}  // namespace gpubox::host
