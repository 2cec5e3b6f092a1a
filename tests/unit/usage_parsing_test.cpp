// The parsers behind sys.usage (agent/usage/): /proc/PID/stat, cgroup
// cpu.stat / cpuacct.usage, /proc/self/cgroup and mountinfo, the NVIDIA
// driver's information files; good input and bad. Plus the /proc sums and the
// GPU probe over fake trees.
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "agent/usage/gpu_inventory.h"
#include "agent/usage/proc_accounting.h"
#include "tests/unit/temp_dir.h"

namespace gpubox::usage {
namespace {

// A /proc/PID/stat line with the given fields and utime..cstime.
std::string stat_line(int pid, const std::string& comm, int ppid, int session, int utime, int stime, int cutime, int cstime) {
  return std::to_string(pid) + " (" + comm + ") S " + std::to_string(ppid) + " " + std::to_string(pid) + " " +
         std::to_string(session) + " 0 -1 4194560 100 0 0 0 " + std::to_string(utime) + " " + std::to_string(stime) + " " +
         std::to_string(cutime) + " " + std::to_string(cstime) + " 20 0 1 0 12345 1000000 200 18446744073709551615\n";
}

TEST(ProcStat, ReadsTheTimesAndTheSession) {
  auto stat = parse_proc_stat(stat_line(42, "python3", 7, 40, 150, 25, 3, 1));
  ASSERT_TRUE(stat);
  EXPECT_EQ(stat->pid, 42);
  EXPECT_EQ(stat->ppid, 7);
  EXPECT_EQ(stat->session, 40);
  EXPECT_EQ(stat->utime, 150u);
  EXPECT_EQ(stat->stime, 25u);
  EXPECT_EQ(stat->cutime, 3u);
  EXPECT_EQ(stat->cstime, 1u);
  EXPECT_EQ(stat->total(), 179u);
}

TEST(ProcStat, ACommWithSpacesAndParenthesesIsSkippedWhole) {
  auto stat = parse_proc_stat(stat_line(9, "a) (b c) 1 2 3", 1, 9, 10, 20, 30, 40));
  ASSERT_TRUE(stat);
  EXPECT_EQ(stat->ppid, 1);
  EXPECT_EQ(stat->total(), 100u);
}

TEST(ProcStat, BadInputIsRefused) {
  EXPECT_FALSE(parse_proc_stat(""));
  EXPECT_FALSE(parse_proc_stat("garbage"));
  EXPECT_FALSE(parse_proc_stat("12 (sh) S 1 12 12"));                      // cut short
  EXPECT_FALSE(parse_proc_stat("x (sh) S 1 12 12 0 -1 0 0 0 0 0 1 2 3 4"));  // pid not a number
  EXPECT_FALSE(parse_proc_stat("12 (sh) S 1 12 12 0 -1 0 0 0 0 0 1 -2 3 4"));  // negative time
  EXPECT_FALSE(parse_proc_stat("12 (sh) S 1 12 12 0 -1 0 0 0 0 0 1 2 3 99999999999999999999999"));  // overflow
  EXPECT_FALSE(parse_proc_stat("12 sh) S 1 12 12 0 -1 0 0 0 0 0 1 2 3 4"));  // no " ("
}

TEST(CgroupFiles, CpuStatUsageUsec) {
  EXPECT_EQ(parse_cpu_stat_usage_usec("usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n"), 2500000u);
  EXPECT_EQ(parse_cpu_stat_usage_usec("nr_periods 0\nusage_usec 7\n"), 7u);
  EXPECT_FALSE(parse_cpu_stat_usage_usec(""));
  EXPECT_FALSE(parse_cpu_stat_usage_usec("user_usec 5\n"));
  EXPECT_FALSE(parse_cpu_stat_usage_usec("usage_usec lots\n"));
  EXPECT_FALSE(parse_cpu_stat_usage_usec("usage_usec -5\n"));
  EXPECT_FALSE(parse_cpu_stat_usage_usec("usage_usec"));
}

TEST(CgroupFiles, SingleNumber) {
  EXPECT_EQ(parse_single_number("123456789\n"), 123456789u);
  EXPECT_EQ(parse_single_number("  5 "), 5u);
  EXPECT_FALSE(parse_single_number(""));
  EXPECT_FALSE(parse_single_number("max\n"));
  EXPECT_FALSE(parse_single_number("1 2\n"));
  EXPECT_FALSE(parse_single_number("12abc"));
}

TEST(CgroupFiles, ProcSelfCgroupOfAHybridHost) {
  auto paths = parse_proc_cgroup(
      "9:name=systemd:/\n4:memory:/gpubox-abc/sandbox\n2:cpu,cpuacct:/gpubox-abc/sandbox\n0::/gpubox/gpubox-abc/sandbox\n");
  ASSERT_TRUE(paths.v2);
  EXPECT_EQ(*paths.v2, "/gpubox/gpubox-abc/sandbox");
  EXPECT_EQ(paths.v1.at("memory"), "/gpubox-abc/sandbox");
  EXPECT_EQ(paths.v1.at("cpuacct"), "/gpubox-abc/sandbox");
  EXPECT_EQ(paths.v1.at("cpu"), "/gpubox-abc/sandbox");
}

TEST(CgroupFiles, ProcSelfCgroupBadLinesAreSkipped) {
  auto paths = parse_proc_cgroup("nonsense\n3:memory\n4:cpuacct:relative/path\n\n0::\n");
  EXPECT_FALSE(paths.v2);
  EXPECT_TRUE(paths.v1.empty());
}

TEST(CgroupFiles, MountinfoFindsCgroupMountsAndTheirControllers) {
  auto v1 = parse_mountinfo_line(
      "30 25 0:26 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:12 - cgroup cgroup rw,cpu,cpuacct");
  ASSERT_TRUE(v1);
  EXPECT_FALSE(v1->v2);
  EXPECT_EQ(v1->mount_point, "/sys/fs/cgroup/cpu,cpuacct");
  EXPECT_EQ(v1->controllers, (std::vector<std::string>{"cpu", "cpuacct"}));
  auto v2 = parse_mountinfo_line("28 25 0:24 /libpod-x /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate");
  ASSERT_TRUE(v2);
  EXPECT_TRUE(v2->v2);
  EXPECT_EQ(v2->root, "/libpod-x");
  EXPECT_FALSE(parse_mountinfo_line("22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw"));
  EXPECT_FALSE(parse_mountinfo_line(""));
  EXPECT_FALSE(parse_mountinfo_line("30 25 0:26 / /sys/fs/cgroup/cpu rw"));  // no " - "
  EXPECT_FALSE(parse_mountinfo_line("30 25 0:26 relative /x rw - cgroup cgroup rw,cpu"));
}

TEST(CgroupFiles, CgroupDirIsTheMountPlusThePathBelowItsRoot) {
  CgroupMount host{false, {"cpuacct"}, "/", "/sys/fs/cgroup/cpuacct"};
  EXPECT_EQ(cgroup_dir(host, "/gpubox-abc/sandbox"), "/sys/fs/cgroup/cpuacct/gpubox-abc/sandbox");
  EXPECT_EQ(cgroup_dir(host, "/"), "/sys/fs/cgroup/cpuacct");
  CgroupMount container{true, {}, "/libpod-x", "/sys/fs/cgroup"};  // a container sees its own cgroup as the mount
  EXPECT_EQ(cgroup_dir(container, "/libpod-x"), "/sys/fs/cgroup");
  EXPECT_EQ(cgroup_dir(container, "/libpod-x/child"), "/sys/fs/cgroup/child");
  EXPECT_FALSE(cgroup_dir(container, "/libpod-xy"));
  EXPECT_FALSE(cgroup_dir(container, "/other"));
  EXPECT_FALSE(cgroup_dir(host, "/a/../../etc"));
}

TEST(LiveCpu, SumsTheSelectedProcessesOfAProcTree) {
  test::TempDir proc;
  auto add = [&](int pid, const std::string& line) {
    ::mkdir(proc.file(std::to_string(pid)).c_str(), 0755);
    proc.write(std::to_string(pid) + "/stat", line);
  };
  long tick = ::sysconf(_SC_CLK_TCK);
  add(100, stat_line(100, "sh", 1, 100, static_cast<int>(tick), 0, 0, 0));         // session 100: 1 s
  add(101, stat_line(101, "python3", 100, 100, 0, static_cast<int>(tick), 0, 0));  // session 100: 1 s
  add(200, stat_line(200, "other", 1, 200, static_cast<int>(5 * tick), 0, 0, 0));  // another session
  add(300, "unreadable junk");                                                      // skipped
  ::mkdir(proc.file("self").c_str(), 0755);                                         // not a pid
  EXPECT_DOUBLE_EQ(session_cpu_seconds(100, proc.path()), 2.0);
  EXPECT_DOUBLE_EQ(session_cpu_seconds(200, proc.path()), 5.0);
  EXPECT_DOUBLE_EQ(session_cpu_seconds(999, proc.path()), 0.0);
  EXPECT_DOUBLE_EQ(session_cpu_seconds(0, proc.path()), 0.0);
  EXPECT_DOUBLE_EQ(session_cpu_seconds(100, proc.file("missing")), 0.0);
}

TEST(LiveCpu, TheProcessTreeCountsTheAgentsOwnCpu) {
  // This test process stands in for the agent: its own CPU is in the tree's figure.
  volatile double sink = 0;
  for (int i = 0; i < 20'000'000; ++i) sink = sink + i * 0.5;
  double tree = process_tree_cpu_seconds();
  EXPECT_GT(tree, 0.0);
  EXPECT_LT(tree, 3600.0);
}

TEST(GpuInventory, NvidiaInformation) {
  auto info = parse_nvidia_information(
      "Model: \t\t NVIDIA H200\nIRQ:   0\nGPU UUID: \t GPU-1234\nVideo BIOS: \t 96.00.99.00.01\nDevice Minor: \t 3\n");
  ASSERT_TRUE(info);
  EXPECT_EQ(info->model, "NVIDIA H200");
  EXPECT_EQ(info->minor, 3);
  EXPECT_FALSE(parse_nvidia_information(""));
  EXPECT_FALSE(parse_nvidia_information("Model: NVIDIA H200\n"));                  // no minor
  EXPECT_FALSE(parse_nvidia_information("Device Minor: 0\n"));                     // no model
  EXPECT_FALSE(parse_nvidia_information("Model: X\nDevice Minor: minus one\n"));   // minor not a number
  EXPECT_FALSE(parse_nvidia_information("Model: X\nDevice Minor: -1\n"));
}

TEST(GpuInventory, CountsDeviceNodesAndNamesTheirModels) {
  test::TempDir root;
  ::mkdir(root.file("dev").c_str(), 0755);
  for (const char* node : {"nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-caps"}) root.write(std::string("dev/") + node, "");
  ::mkdir(root.file("gpus").c_str(), 0755);
  for (int minor : {0, 1, 2}) {  // the driver lists a third GPU this sandbox was not given
    std::string dir = "gpus/0000:0" + std::to_string(minor) + ":00.0";
    ::mkdir(root.file(dir).c_str(), 0755);
    root.write(dir + "/information", "Model: \t NVIDIA H100 80GB HBM3\nDevice Minor: \t " + std::to_string(minor) + "\n");
  }
  GpuInventory gpus = probe_gpus(root.file("dev"), root.file("gpus"));
  EXPECT_EQ(gpus.count, 2);
  ASSERT_TRUE(gpus.type);
  EXPECT_EQ(*gpus.type, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(gpus.models.size(), 2u);
}

TEST(GpuInventory, NoGpusIsCountZeroAndTypeNull) {
  test::TempDir root;
  GpuInventory gpus = probe_gpus(root.path(), root.file("missing"));
  EXPECT_EQ(gpus.count, 0);
  EXPECT_FALSE(gpus.type);
  GpuInventory unnamed = probe_gpus(root.file("missing"), root.file("missing"));
  EXPECT_EQ(unnamed.count, 0);
}

TEST(GpuInventory, ANodeWithoutDriverInformationCountsWithoutAType) {
  test::TempDir root;
  root.write("nvidia0", "");
  GpuInventory gpus = probe_gpus(root.path(), root.file("missing"));
  EXPECT_EQ(gpus.count, 1);
  EXPECT_FALSE(gpus.type);
  EXPECT_EQ(gpus.models, std::vector<std::string>{""});
}

}  // namespace
}  // namespace gpubox::usage
