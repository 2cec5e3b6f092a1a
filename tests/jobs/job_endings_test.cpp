// Every way a job can end, against the real agent as PID 1 over real RPC:
// whatever the job wrote under out/ before its end is in a staged tar+zstd
// archive whose manifest verifies, and the result says how it ended.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>

#include <filesystem>
#include <fstream>

#include "tests/jobs/jobs_sandbox.h"
#include "tests/prerequisite.h"
#include "tests/support/host_processes.h"

namespace gpubox::testing {
namespace {

using nlohmann::json;

TEST(JobEndings, SuccessStagesOutAndLogsWithFeaturedAndHiddenFiles) {
  auto sandbox = JobsSandbox::start();
  ASSERT_TRUE(sandbox);
  json job = sandbox->submit({{"command", "echo hello; echo warn >&2; mkdir -p out/ckpt; echo plot > out/fig.png; "
                                          "echo w > out/ckpt/w.bin; echo $GPUBOX_JOB_ID $SEED > out/env.txt"},
                              {"env", {{"SEED", "42"}}},
                              {"outputs", {{{"glob", "*.png"}, {"kind", "featured"}}, {{"glob", "ckpt/*"}, {"kind", "hidden"}}}},
                              {"intent", "a probe"}});
  std::string id = job["job_id"];
  EXPECT_EQ(id, "job-1");
  json info = sandbox->wait_finished(id);
  const json& result = info["result"];
  EXPECT_EQ(result["status"], "succeeded");
  EXPECT_EQ(result["exit_code"], 0);
  EXPECT_TRUE(result["signal"].is_null());
  EXPECT_TRUE(result["deadline_fired"].is_null());
  EXPECT_TRUE(result["error_kind"].is_null());
  EXPECT_EQ(result["stdout_tail"], "hello\n");
  EXPECT_EQ(result["stderr_tail"], "warn\n");
  EXPECT_EQ(result["featured_files"], json({"fig.png"}));
  EXPECT_EQ(result["output_files"], json({"env.txt", "fig.png"})) << "hidden ckpt/w.bin is archived but not listed";
  EXPECT_GT(result["job_wall_s"].get<double>(), 0.0);
  EXPECT_EQ(info["intent"], "a probe");

  Harvest harvest = sandbox->harvest(id);
  EXPECT_EQ(harvest.files["out/fig.png"], "plot\n");
  EXPECT_EQ(harvest.files["out/ckpt/w.bin"], "w\n");
  EXPECT_EQ(harvest.files["out/env.txt"], "job-1 42\n");
  EXPECT_EQ(harvest.files["stdout.log"], "hello\n");
  EXPECT_EQ(harvest.files["stderr.log"], "warn\n");
  EXPECT_EQ(harvest.manifest["archive"]["size"], harvest.archive_size);
}

TEST(JobEndings, SecretsReachTheJobButNoRecordOrJournal) {
  auto sandbox = JobsSandbox::start();
  ASSERT_TRUE(sandbox);
  const std::string secret = "hf_job_secret_8d1f";
  std::string id = sandbox->submit({{"command", "echo \"$HF_TOKEN\" > out/seen.txt"}, {"secrets", {{"HF_TOKEN", secret}}}})["job_id"];
  json info = sandbox->wait_finished(id);
  EXPECT_EQ(info["result"]["status"], "succeeded");
  EXPECT_EQ(sandbox->harvest(id).files["out/seen.txt"], secret + "\n");
  auto listed = sandbox->call("job.list", json::object());
  ASSERT_TRUE(listed);
  EXPECT_EQ(listed->dump().find(secret), std::string::npos);
  EXPECT_EQ(info.dump().find(secret), std::string::npos);
  int journals = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(sandbox->state_dir())) {
    if (!entry.is_regular_file() || entry.path().filename() != "events.jsonl") continue;
    std::ifstream in(entry.path());
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    journals += text.find("\"submitted\"") != std::string::npos;
    EXPECT_EQ(text.find(secret), std::string::npos) << entry.path();
  }
  EXPECT_EQ(journals, 1) << "the journal that recorded the submission was read";
}

TEST(JobEndings, FailureStillStagesEverything) {
  auto sandbox = JobsSandbox::start();
  ASSERT_TRUE(sandbox);
  std::string id = sandbox->submit({{"command", "echo partial > out/part.txt; echo boom >&2; exit 3"}})["job_id"];
  json result = sandbox->wait_finished(id)["result"];
  EXPECT_EQ(result["status"], "failed");
  EXPECT_EQ(result["exit_code"], 3);
  EXPECT_EQ(result["error_kind"], "nonzero_exit");
  EXPECT_EQ(result["stderr_tail"], "boom\n");
  EXPECT_EQ(sandbox->harvest(id).files["out/part.txt"], "partial\n");
}

TEST(JobEndings, EmptyOutIsSaidSo) {
  auto sandbox = JobsSandbox::start();
  ASSERT_TRUE(sandbox);
  std::string id = sandbox->submit({{"command", "true"}})["job_id"];
  json result = sandbox->wait_finished(id)["result"];
  EXPECT_EQ(result["status"], "succeeded");
  EXPECT_NE(result["system_hint"].get<std::string>().find("out/ is empty"), std::string::npos);
  Harvest harvest = sandbox->harvest(id);
  EXPECT_EQ(harvest.files.count("stdout.log"), 1u);
}

TEST(JobEndings, SigkillFromOutsideTheAgentIsKilledAndStaged) {
  auto sandbox = JobsSandbox::start();
  ASSERT_TRUE(sandbox);
  std::string id = sandbox->submit({{"command", "echo before > out/before.txt; kill -KILL $$; echo after > out/after.txt"}})["job_id"];
  json result = sandbox->wait_finished(id)["result"];
  EXPECT_EQ(result["status"], "killed");
  EXPECT_EQ(result["signal"], SIGKILL);
  EXPECT_TRUE(result["exit_code"].is_null());
  EXPECT_NE(result["system_hint"].get<std::string>().find("not sent by the agent"), std::string::npos) << result.dump();
  Harvest harvest = sandbox->harvest(id);
  EXPECT_EQ(harvest.files["out/before.txt"], "before\n");
  EXPECT_EQ(harvest.files.count("out/after.txt"), 0u);
}

TEST(JobEndings, OwnTimeoutTermsTheGroupAndTheCheckpointWrittenOnTermIsStaged) {
  auto sandbox = JobsSandbox::start({{"jobs", {{"grace_seconds", 5}}}});
  ASSERT_TRUE(sandbox);
  std::string id = sandbox->submit({{"command", "trap 'echo step-7 > out/checkpoint; exit 0' TERM; echo started > out/log.txt; "
                                                "while :; do sleep 0.05; done"},
                                    {"timeout_seconds", 0.5}})["job_id"];
  auto began = Clock::now();
  json info = sandbox->wait_finished(id);
  double took = std::chrono::duration<double>(Clock::now() - began).count();
  const json& result = info["result"];
  EXPECT_EQ(result["status"], "timed_out");
  EXPECT_EQ(result["deadline_fired"], "job_timeout");
  EXPECT_EQ(result["exit_code"], 0) << "the TERM handler exited by itself";
  EXPECT_NE(result["system_hint"].get<std::string>().find("within the grace"), std::string::npos);
  EXPECT_LT(took, 4.0) << "it ended on TERM, long before the 5 s grace";
  EXPECT_DOUBLE_EQ(info["timeout_s"].get<double>(), 0.5);
  Harvest harvest = sandbox->harvest(id);
  EXPECT_EQ(harvest.files["out/checkpoint"], "step-7\n");
  EXPECT_EQ(harvest.files["out/log.txt"], "started\n");
}

TEST(JobEndings, AJobThatIgnoresTermIsKilledAfterTheGraceAndItsOutputsAreStaged) {
  auto sandbox = JobsSandbox::start({{"jobs", {{"grace_seconds", 0.5}}}});
  ASSERT_TRUE(sandbox);
  std::string id = sandbox->submit({{"command", "trap '' TERM; echo kept > out/kept.txt; (sleep 1000 &); while :; do sleep 0.05; done"},
                                    {"timeout_seconds", 0.3}})["job_id"];
  json result = sandbox->wait_finished(id)["result"];
  EXPECT_EQ(result["status"], "timed_out");
  EXPECT_EQ(result["signal"], SIGKILL);
  EXPECT_NE(result["system_hint"].get<std::string>().find("outlived the grace"), std::string::npos) << result.dump();
  EXPECT_EQ(sandbox->harvest(id).files["out/kept.txt"], "kept\n");
  // The background sleep of its group went with it.
  EXPECT_TRUE(wait_until([&] {
    for (const auto& process : list_processes()) {
      if (process.comm == "sleep" && process.state != 'Z') {
        std::string cmdline = read_file("/proc/" + std::to_string(process.pid) + "/cmdline");
        if (cmdline.find("1000") != std::string::npos) return false;
      }
    }
    return true;
  }, milliseconds(3000)));
}

TEST(JobEndings, CancelStopsARunningJobAndAWaitingOne) {
  auto sandbox = JobsSandbox::start();
  ASSERT_TRUE(sandbox);
  std::string running = sandbox->submit({{"command", "echo r > out/r.txt; while :; do sleep 0.05; done"}})["job_id"];
  std::string waiting = sandbox->submit({{"command", "echo never > out/w.txt"}})["job_id"];
  auto queued = sandbox->call("job.wait", {{"job_id", waiting}, {"timeout_s", 0}});
  ASSERT_TRUE(queued);
  EXPECT_EQ((*queued)["state"], "queued") << "max_concurrent is 1";
  EXPECT_EQ((*queued)["queue_position"], 1);
  ASSERT_TRUE(wait_until([&] { return file_exists(sandbox->state_dir() + "/jobs/" + running + "/work/out/r.txt"); }, milliseconds(5000)));
  ASSERT_TRUE(sandbox->call("job.cancel", {{"job_id", waiting}}));
  ASSERT_TRUE(sandbox->call("job.cancel", {{"job_id", running}}));
  json first = sandbox->wait_finished(running)["result"];
  json second = sandbox->wait_finished(waiting)["result"];
  EXPECT_EQ(first["status"], "cancelled");
  EXPECT_EQ(second["status"], "cancelled");
  EXPECT_TRUE(second["exit_code"].is_null()) << "it never ran";
  EXPECT_EQ(sandbox->harvest(running).files["out/r.txt"], "r\n");
  EXPECT_EQ(sandbox->harvest(waiting).files.count("out/w.txt"), 0u);
}

TEST(JobEndings, ContainerDeadlineHarvestsRunningJobsThenTheAgentEnds) {
  // Life 6 s, margin 4 s: the harvest watchdog fires at 2 s (room for a slow start under sanitizers).
  auto sandbox = JobsSandbox::start({{"lifecycle", {{"timeout_seconds", 6}, {"harvest_margin_seconds", 4}}}});
  ASSERT_TRUE(sandbox);
  std::string id = sandbox->submit({{"command", "trap 'echo saved > out/ckpt; exit 0' TERM; while :; do sleep 0.05; done"}})["job_id"];
  json info = sandbox->wait_finished(id, 10);
  const json& result = info["result"];
  EXPECT_EQ(result["status"], "timed_out");
  EXPECT_EQ(result["deadline_fired"], "container_deadline");
  EXPECT_EQ(result["error_kind"], "container_deadline");
  double timeout = info["timeout_s"].get<double>();
  EXPECT_GT(timeout, 0.0);
  EXPECT_LE(timeout, 2.0) << "the default timeout: remaining life minus the margin";
  EXPECT_EQ(sandbox->harvest(id).files["out/ckpt"], "saved\n");
  auto refused = sandbox->call("job.submit", {{"command", "true"}});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.status().code(), ErrorCode::unavailable);
  EXPECT_NE(refused.status().message().find("harvest watchdog"), std::string::npos);
  EXPECT_EQ(sandbox->box().wait_exit(milliseconds(10'000)), 0) << "the agent ends at the container deadline";
}

TEST(JobEndings, AgentSigtermStagesTheRunningJobBeforeExiting) {
  std::string persistent = make_temp_dir("gpubox-persist");
  struct Remove {
    std::string path;
    ~Remove() { std::filesystem::remove_all(path); }
  } remove{persistent};
  auto sandbox = JobsSandbox::start({{"lifecycle", {{"persistent_dir", persistent}}}});
  ASSERT_TRUE(sandbox);
  std::string id = sandbox->submit({{"command", "echo mid > out/mid.txt; while :; do sleep 0.05; done"}})["job_id"];
  std::string staged = sandbox->state_dir() + "/staged/" + id;
  ASSERT_TRUE(wait_until([&] { return file_exists(sandbox->state_dir() + "/jobs/" + id + "/work/out/mid.txt"); }, milliseconds(5000)));
  ASSERT_TRUE(sandbox->box().signal(SIGTERM));
  ASSERT_TRUE(sandbox->box().wait_exit(milliseconds(10'000)).has_value());
  json result = json::parse(read_file(staged + "/result.json"));
  EXPECT_EQ(result["status"], "killed");
  EXPECT_EQ(result["error_kind"], "agent_shutdown");
  json manifest = json::parse(read_file(staged + "/manifest.json"));
  Harvest harvest = open_archive(staged + "/archive.tar.zst", manifest, sandbox->box().path("after-term"));
  EXPECT_EQ(harvest.files["out/mid.txt"], "mid\n");
  EXPECT_EQ(manifest["archive"]["sha256"], sha256_hex(read_file(staged + "/archive.tar.zst")));
  EXPECT_EQ(read_file(persistent + "/" + id + "/archive.tar.zst"), read_file(staged + "/archive.tar.zst"))
      << "copied to the persistent dir before exiting";

  // A new agent on the same state dir knows the job and serves its archive.
  auto again = JobsSandbox::start({}, sandbox->state_dir());
  ASSERT_TRUE(again);
  auto list = again->call("job.list", json::object());
  ASSERT_TRUE(list);
  ASSERT_EQ((*list)["jobs"].size(), 1u);
  EXPECT_EQ((*list)["jobs"][0]["status"], "killed");
  EXPECT_EQ(again->harvest(id).files["out/mid.txt"], "mid\n");
}

// Whether this machine gives the agent what it limits a job's memory with: a cgroup v1 memory
// hierarchy of its own cgroup (agent/jobs/job_cgroup.h), read here without the agent's code.
bool machine_has_v1_memory_cgroup() {
  std::ifstream cgroups("/proc/self/cgroup");
  for (std::string line; std::getline(cgroups, line);) {
    auto first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    std::string controllers = "," + line.substr(first + 1, second - first - 1) + ",";
    if (controllers.find(",memory,") == std::string::npos) continue;
    return std::filesystem::exists("/sys/fs/cgroup/memory" + line.substr(second + 1) + "/memory.limit_in_bytes");
  }
  return false;
}

// Submits a job under a 48 MiB memory limit and returns its result. Where the machine has the
// cgroup the limit is applied with, a job that succeeds under it is a limit that did not hold:
// a failure, never a skip. Only a machine without one skips.
json oom_result(JobsSandbox& sandbox, const std::string& command, std::string* id) {
  *id = sandbox.submit({{"command", command}, {"memory_limit_bytes", 48 << 20}})["job_id"];
  return sandbox.wait_finished(*id, 60)["result"];
}

constexpr char kNoMemoryCgroup[] =
    "this machine has no cgroup v1 memory hierarchy, which the agent limits a job's memory with (agent/jobs/job_cgroup.h)";

TEST(JobEndings, OomKillOfTheJobsMainProcessIsKilledWithErrorKindOom) {
  if (!machine_has_v1_memory_cgroup()) GTEST_SKIP() << kNoMemoryCgroup;
  auto sandbox = JobsSandbox::start();
  ASSERT_TRUE(sandbox);
  std::string id;
  json result = oom_result(*sandbox, "echo before > out/before.txt; exec /usr/bin/python3 -c 'b = bytearray(200 << 20); print(len(b))'", &id);
  ASSERT_NE(result["status"], "succeeded") << "the job succeeded under its 48 MiB memory limit: the limit did not hold "
                                           << result.dump();
  EXPECT_EQ(result["status"], "killed");
  EXPECT_EQ(result["signal"], SIGKILL);
  EXPECT_EQ(result["error_kind"], "oom") << result.dump();
  EXPECT_NE(result["system_hint"].get<std::string>().find("out of memory"), std::string::npos);
  EXPECT_EQ(sandbox->harvest(id).files["out/before.txt"], "before\n");
}

TEST(JobEndings, OomKillOfAChildProcessIsReportedEvenWhenTheJobExitsByItself) {
  if (!machine_has_v1_memory_cgroup()) GTEST_SKIP() << kNoMemoryCgroup;
  auto sandbox = JobsSandbox::start();
  ASSERT_TRUE(sandbox);
  // tail keeps a 128 MB line in memory: far beyond the 48 MiB limit. The
  // shell survives and exits 137: the kill must still be found and named.
  std::string id;
  json result = oom_result(*sandbox, "echo before > out/before.txt; head -c 128000000 /dev/zero | tail > /dev/null", &id);
  ASSERT_NE(result["status"], "succeeded") << "the job succeeded under its 48 MiB memory limit: the limit did not hold "
                                           << result.dump();
  EXPECT_EQ(result["status"], "failed");
  EXPECT_EQ(result["exit_code"], 137);
  EXPECT_EQ(result["error_kind"], "oom") << result.dump();
  EXPECT_NE(result["system_hint"].get<std::string>().find("out of memory"), std::string::npos);
  EXPECT_EQ(sandbox->harvest(id).files["out/before.txt"], "before\n");
}

TEST(JobEndings, ADiskThatFillsDuringTheJobIsHintedAndWhatWasWrittenIsStaged) {
  std::string fs = make_temp_dir("gpubox-jobs-fs");
  if (::mount("tmpfs", fs.c_str(), "tmpfs", 0, "size=1m") != 0) {
    std::filesystem::remove_all(fs);
    GPUBOX_MISSING("cannot mount a tmpfs");
  }
  struct Unmount {
    std::string path;
    ~Unmount() {
      ::umount2(path.c_str(), MNT_DETACH);
      std::filesystem::remove_all(path);
    }
  } unmount{fs};
  {
    auto sandbox = JobsSandbox::start({{"jobs", {{"dir", fs}}}});
    ASSERT_TRUE(sandbox);
    std::string id = sandbox->submit({{"command", "echo first > out/first.txt; head -c 4000000 /dev/urandom > out/big.bin"}})["job_id"];
    json result = sandbox->wait_finished(id)["result"];
    EXPECT_EQ(result["status"], "failed");
    EXPECT_EQ(result["error_kind"], "disk_full") << result.dump();
    EXPECT_NE(result["system_hint"].get<std::string>().find("disk full"), std::string::npos);
    Harvest harvest = sandbox->harvest(id);
    EXPECT_EQ(harvest.files["out/first.txt"], "first\n");
    EXPECT_GT(harvest.files["out/big.bin"].size(), 500'000u) << "what head wrote before the disk filled";
    EXPECT_EQ(harvest.manifest["missing"].size(), 0u);
  }
}

}  // namespace
}  // namespace gpubox::testing
