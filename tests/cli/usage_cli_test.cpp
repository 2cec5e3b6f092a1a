// gpubox usage ID (and the usage in gpubox info): container, CPU and GPU
// seconds and each job's wall and CPU seconds from the agent's own clock and
// the kernel's accounting, through the real CLI against real sandboxes on
// every backend of BackendCliTest. The jobs run the sandbox's python3 (the
// host's for local, the test image's for podman).
#include <chrono>
#include <functional>
#include <thread>

#include <gmock/gmock.h>

#include "tests/cli/cli_fixture.h"

namespace gpubox::testing {
namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

// Burns `seconds` of its own CPU time, however busy the machine is.
std::string busy_command(double seconds) {
  return "python3 -c 'import time\nt = time.process_time()\nwhile time.process_time() - t < " + std::to_string(seconds) +
         ": pass'";
}

// Runs the CLI as the test's own run() does.
using Runner = std::function<CliRun(const std::vector<std::string>&)>;

nlohmann::json usage_json(const Runner& run, const std::string& id) {
  CliRun ran = run({"usage", id, "--json"});
  EXPECT_EQ(ran.status, 0) << ran.out << ran.err;
  nlohmann::json parsed = nlohmann::json::parse(ran.out, nullptr, false);
  EXPECT_TRUE(parsed.is_object()) << "--json prints one JSON object: " << ran.out;
  return parsed.is_object() ? parsed : nlohmann::json::object();
}

const nlohmann::json& job_of(const nlohmann::json& usage, const std::string& job) {
  static const nlohmann::json none = nlohmann::json::object();
  for (const auto& entry : usage["usage"]["jobs"]) {
    if (entry.value("job_id", "") == job) return entry;
  }
  ADD_FAILURE() << "no " << job << " in " << usage.dump();
  return none;
}

std::string submit(const Runner& run, const std::string& id, const std::string& command) {
  CliRun submitted = run({"submit", id, "--", command});
  EXPECT_EQ(submitted.status, 0) << submitted.err;
  return submitted.out.substr(0, submitted.out.find('\n'));
}

TEST_P(BackendCliTest, UsageCountsContainerJobAndSandboxSeconds) {
  Runner cli = [this](const std::vector<std::string>& args) { return run(args); };
  auto before_create = Clock::now();
  std::string id = create({"--memory", "512"});
  std::string busy = submit(cli, id, busy_command(1.0));
  std::string sleeper = submit(cli, id, "sleep 1");
  for (const auto& job : {busy, sleeper}) {
    CliRun waited = run({"wait", id, job, "--timeout", "120"});
    ASSERT_EQ(waited.status, 0) << waited.out << waited.err;
  }

  nlohmann::json first = usage_json(cli, id);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  nlohmann::json second = usage_json(cli, id);
  double since_create = std::chrono::duration<double>(Clock::now() - before_create).count();
  ASSERT_TRUE(second.contains("usage")) << second.dump();
  const auto& usage = second["usage"];
  EXPECT_EQ(second["id"], id);
  EXPECT_EQ(second["backend"], backend());
  EXPECT_EQ(second["requested"]["memory_mib"], 512);

  double container_s = usage["container_s"].get<double>();
  EXPECT_GE(container_s - first["usage"]["container_s"].get<double>(), 0.29) << "the agent's clock runs";
  EXPECT_LE(container_s, since_create) << "the agent started after the create began";

  const auto& busy_usage = job_of(second, busy);
  EXPECT_EQ(busy_usage["state"], "finished");
  double busy_cpu = busy_usage["cpu_s"].get<double>(), busy_wall = busy_usage["wall_s"].get<double>();
  EXPECT_GE(busy_cpu, 0.5) << busy_usage.dump();
  EXPECT_LE(busy_cpu, busy_wall + 0.25) << "one single-threaded process: no more CPU than wall time";
  const auto& sleeper_usage = job_of(second, sleeper);
  EXPECT_LT(sleeper_usage["cpu_s"].get<double>(), 0.2) << sleeper_usage.dump();
  EXPECT_GE(sleeper_usage["wall_s"].get<double>(), 0.9) << sleeper_usage.dump();
  EXPECT_GE(usage["cpu_s"].get<double>(), busy_cpu) << "the sandbox's CPU includes its jobs'";
  EXPECT_GE(usage["cpu_s"].get<double>(), first["usage"]["cpu_s"].get<double>());

  EXPECT_GE(usage["gpus"]["count"].get<int>(), 0);
  EXPECT_DOUBLE_EQ(usage["gpu_s"].get<double>(), usage["gpus"]["count"].get<int>() * container_s);
  if (usage["gpus"]["count"] == 0) {
    EXPECT_TRUE(usage["gpus"]["type"].is_null());
  }

  // The job's own info carries the same figures.
  CliRun listed = run({"jobs", id, "--json"});
  ASSERT_EQ(listed.status, 0) << listed.err;
  nlohmann::json jobs = nlohmann::json::parse(listed.out);
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_DOUBLE_EQ(jobs[0]["cpu_s"].get<double>(), busy_cpu);
  EXPECT_DOUBLE_EQ(jobs[0]["result"]["job_cpu_s"].get<double>(), busy_cpu);
  EXPECT_DOUBLE_EQ(jobs[0]["wall_s"].get<double>(), busy_wall);

  // The table for people, and the same usage in info.
  CliRun table = run({"usage", id});
  EXPECT_EQ(table.status, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("container:"));
  EXPECT_THAT(table.out, HasSubstr("memory 512 MiB"));
  EXPECT_THAT(table.out, HasSubstr(busy));
  EXPECT_THAT(table.out, HasSubstr(sleeper));
  CliRun info = run({"info", id, "--json"});
  ASSERT_EQ(info.status, 0) << info.err;
  nlohmann::json info_json = nlohmann::json::parse(info.out);
  ASSERT_TRUE(info_json.contains("usage")) << info.out;
  EXPECT_EQ(info_json["usage"]["jobs"].size(), 2u);
  EXPECT_THAT(run({"info", id}).out, HasSubstr("container:"));
}

TEST_F(CliTest, WithoutAMemoryLimitTheSandboxsMemoryIsStillItsOwn) {
  Runner cli = [this](const std::vector<std::string>& args) { return run(args); };
  std::string id = create();
  ASSERT_EQ(run({"exec", id, "--", "python3", "-c", "b = b'x' * (96 << 20)"}).status, 0);
  nlohmann::json usage = usage_json(cli, id);
  nlohmann::json info = nlohmann::json::parse(run({"info", id, "--json"}).out);
  std::string enforced = info["spec"]["limits_enforced_by"]["memory"];
  EXPECT_THAT(enforced, HasSubstr("unlimited; accounted in the sandbox's own cgroup"));
  const auto& cgroup = usage["usage"]["cgroup"];
  ASSERT_TRUE(cgroup.is_object()) << usage.dump();
  // The sandbox's cgroup, not its host's: the root of its cgroup namespace, the
  // only memory cgroup in its /sys/fs/cgroup (docs/security.md).
  EXPECT_THAT(cgroup["memory_path"].get<std::string>(), ::testing::AnyOf("/sys/fs/cgroup/memory", "/sys/fs/cgroup/unified", "/sys/fs/cgroup"))
      << usage.dump();
  EXPECT_FALSE(cgroups_of(id).empty());
  EXPECT_GE(cgroup["memory_peak_bytes"].get<double>(), 96 << 20);
}

TEST_P(BackendCliTest, UsageSeesARunningJobsCpuGrow) {
  Runner cli = [this](const std::vector<std::string>& args) { return run(args); };
  std::string id = create();
  std::string job = submit(cli, id, busy_command(60));
  double seen = 0;
  for (int i = 0; i < 200 && seen < 0.5; ++i) {
    nlohmann::json usage = usage_json(cli, id);
    const auto& entry = job_of(usage, job);
    if (entry.value("state", "") == "running" && entry["cpu_s"].is_number()) seen = entry["cpu_s"].get<double>();
    if (seen < 0.5) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_GE(seen, 0.5) << "a running job's CPU is read live from its session's processes";
  ASSERT_EQ(run({"cancel", id, job}).status, 0);
  run({"wait", id, job, "--timeout", "60"});
}

TEST_P(BackendCliTest, UsageOfAnUnknownSandboxIsAUsageError) {
  CliRun unknown = run({"usage", "no-such-sandbox"});
  EXPECT_EQ(unknown.status, 2);
  EXPECT_THAT(unknown.err, HasSubstr("no-such-sandbox"));
  CliRun as_json = run({"usage", "no-such-sandbox", "--json"});
  EXPECT_EQ(as_json.status, 2);
  nlohmann::json error = nlohmann::json::parse(as_json.out, nullptr, false);
  ASSERT_TRUE(error.is_object()) << as_json.out;
  EXPECT_TRUE(error.contains("error"));
  EXPECT_EQ(run({"usage"}).status, 2);
  EXPECT_EQ(run({"usage", "a", "b"}).status, 2);
}

}  // namespace
}  // namespace gpubox::testing
