// classify(): every ending gets the status, deadline_fired, hint and error kind the protocol promises.
#include "agent/jobs/job_result.h"

#include <gtest/gtest.h>
#include <signal.h>

#include "tests/unit/temp_dir.h"

namespace gpubox::jobs {
namespace {

StagingSummary staged(std::vector<std::string> files = {"a.txt"}) {
  StagingSummary summary;
  summary.archive_written = true;
  summary.output_files = std::move(files);
  return summary;
}

Ending exited(int code) {
  Ending ending;
  ending.started = true;
  ending.exit_code = code;
  return ending;
}

TEST(Classify, ExitZeroSucceeds) {
  JobResult result = classify(exited(0), staged());
  EXPECT_EQ(result.status, JobStatus::succeeded);
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_EQ(result.signal, std::nullopt);
  EXPECT_EQ(result.error_kind, std::nullopt);
  EXPECT_EQ(result.deadline_fired, std::nullopt);
  EXPECT_EQ(result.system_hint, "");
}

TEST(Classify, NonZeroExitFails) {
  JobResult result = classify(exited(3), staged());
  EXPECT_EQ(result.status, JobStatus::failed);
  EXPECT_EQ(result.exit_code, 3);
  EXPECT_EQ(result.error_kind, "nonzero_exit");
}

TEST(Classify, OwnTimeoutIsTimedOutWithJobTimeout) {
  Ending ending = exited(0);
  ending.stop = StopReason::job_timeout;
  ending.killed_after_grace = true;
  ending.exit_code = 0;
  ending.signal = SIGKILL;
  JobResult result = classify(ending, staged());
  EXPECT_EQ(result.status, JobStatus::timed_out);
  EXPECT_EQ(result.deadline_fired, "job_timeout");
  EXPECT_EQ(result.signal, SIGKILL);
  EXPECT_NE(result.system_hint.find("outlived the grace"), std::string::npos) << result.system_hint;
}

TEST(Classify, ContainerDeadlineIsTimedOutWithContainerDeadline) {
  Ending ending = exited(143);
  ending.stop = StopReason::container_deadline;
  JobResult result = classify(ending, staged());
  EXPECT_EQ(result.status, JobStatus::timed_out);
  EXPECT_EQ(result.deadline_fired, "container_deadline");
  EXPECT_EQ(result.error_kind, "container_deadline");
  EXPECT_NE(result.system_hint.find("within the grace"), std::string::npos) << result.system_hint;
}

TEST(Classify, CancelBeforeStartIsCancelledWithoutExitCode) {
  Ending ending;
  ending.stop = StopReason::cancel;
  JobResult result = classify(ending, staged({}));
  EXPECT_EQ(result.status, JobStatus::cancelled);
  EXPECT_EQ(result.exit_code, std::nullopt);
  EXPECT_NE(result.system_hint.find("before it started"), std::string::npos);
  EXPECT_NE(result.system_hint.find("out/ is empty"), std::string::npos);
}

TEST(Classify, OomKillIsKilledWithOomEvidence) {
  Ending ending = exited(0);
  ending.signal = SIGKILL;
  ending.oom_killed = true;
  ending.oom_evidence = "the oom_kill counter rose";
  JobResult result = classify(ending, staged());
  EXPECT_EQ(result.status, JobStatus::killed);
  EXPECT_EQ(result.error_kind, "oom");
  EXPECT_NE(result.system_hint.find("out of memory"), std::string::npos);
  EXPECT_NE(result.system_hint.find("oom_kill counter"), std::string::npos);
}

TEST(Classify, OomKillOfAChildIsFailedWithOomAndAnExitThatSurvivedItSucceeds) {
  Ending ending = exited(137);
  ending.oom_killed = true;
  ending.oom_evidence = "the oom_kill counter rose";
  JobResult result = classify(ending, staged());
  EXPECT_EQ(result.status, JobStatus::failed);
  EXPECT_EQ(result.error_kind, "oom");
  EXPECT_EQ(result.exit_code, 137);
  ending.exit_code = 0;  // the job handled its child's death
  result = classify(ending, staged());
  EXPECT_EQ(result.status, JobStatus::succeeded);
  EXPECT_NE(result.system_hint.find("out of memory"), std::string::npos) << "still worth knowing";
}

TEST(Classify, ForeignSigkillIsKilledAndSaysTheAgentDidNotSendIt) {
  Ending ending = exited(0);
  ending.signal = SIGKILL;
  JobResult result = classify(ending, staged());
  EXPECT_EQ(result.status, JobStatus::killed);
  EXPECT_EQ(result.error_kind, "signal");
  EXPECT_NE(result.system_hint.find("not sent by the agent"), std::string::npos);
  EXPECT_NE(result.system_hint.find("possibly the kernel OOM killer"), std::string::npos) << "no counter to rule it out";
  ending.oom_ruled_out = "its cgroup's oom_kill counter did not rise";
  EXPECT_NE(classify(ending, staged()).system_hint.find("not the OOM killer: its cgroup"), std::string::npos);
}

TEST(Classify, AgentShutdownIsKilled) {
  Ending ending = exited(0);
  ending.stop = StopReason::agent_shutdown;
  JobResult result = classify(ending, staged());
  EXPECT_EQ(result.status, JobStatus::killed);
  EXPECT_EQ(result.error_kind, "agent_shutdown");
  EXPECT_EQ(result.deadline_fired, std::nullopt);
}

TEST(Classify, LostSaysTheAgentRestarted) {
  Ending ending;
  ending.lost = true;
  ending.started = true;
  JobResult result = classify(ending, staged());
  EXPECT_EQ(result.status, JobStatus::lost);
  EXPECT_EQ(result.exit_code, std::nullopt);
  EXPECT_NE(result.system_hint.find("restarted"), std::string::npos);
}

TEST(Classify, StagingThatMissedFilesNamesThemEvenOnSuccess) {
  StagingSummary summary = staged();
  summary.disk_full = true;
  summary.missing = {"out/big.bin: not archived, the staging disk is full"};
  JobResult result = classify(exited(0), summary);
  EXPECT_EQ(result.status, JobStatus::succeeded) << "the job itself succeeded";
  EXPECT_EQ(result.error_kind, "disk_full");
  EXPECT_EQ(result.missing_files, summary.missing);
  EXPECT_NE(result.system_hint.find("1 file(s) could not be archived"), std::string::npos) << result.system_hint;
}

TEST(Classify, WorkDiskFullIsHinted) {
  Ending ending = exited(1);
  ending.work_disk_full = true;
  JobResult result = classify(ending, staged());
  EXPECT_EQ(result.status, JobStatus::failed);
  EXPECT_EQ(result.error_kind, "disk_full") << "the likely reason it failed";
  EXPECT_NE(result.system_hint.find("disk full"), std::string::npos);
}

TEST(JobResultJson, RoundTrips) {
  JobResult result = classify(exited(2), staged({"x", "y"}));
  result.stdout_tail = "out";
  result.featured_files = {"x"};
  result.output_files = {"x", "y"};
  JobResult back = JobResult::from_json(result.to_json());
  EXPECT_EQ(back.to_json(), result.to_json());
  for (const char* key : {"status", "exit_code", "signal", "job_wall_s", "deadline_fired", "stdout_tail", "stderr_tail",
                          "output_files", "featured_files", "system_hint", "error_kind"}) {
    EXPECT_TRUE(result.to_json().contains(key)) << key;
  }
}

TEST(JobResultJson, CpuSecondsRoundTripAndAreNullWhenUnknown) {
  JobResult result = classify(exited(0), staged({}));
  EXPECT_TRUE(result.to_json()["job_cpu_s"].is_null());
  EXPECT_FALSE(JobResult::from_json(result.to_json()).job_cpu_s);
  result.job_cpu_s = 1.25;
  JobResult back = JobResult::from_json(result.to_json());  // as the journal's "finished" event replays it
  ASSERT_TRUE(back.job_cpu_s);
  EXPECT_DOUBLE_EQ(*back.job_cpu_s, 1.25);
  nlohmann::json older = result.to_json();
  older.erase("job_cpu_s");  // a journal written before job_cpu_s existed
  EXPECT_FALSE(JobResult::from_json(older).job_cpu_s);
  older["job_cpu_s"] = "fast";
  EXPECT_FALSE(JobResult::from_json(older).job_cpu_s);
}

TEST(ReadTail, KeepsTheLastBytesAndCutsAtACharacterStart) {
  test::TempDir dir;
  std::string text = std::string(10, 'a') + "\xc3\xa9" + "end";  // é is two bytes
  std::string path = dir.write("log", text);
  EXPECT_EQ(read_tail(path, 1000), text);
  EXPECT_EQ(read_tail(path, 4), "end") << "the cut lands inside é: skip its continuation byte";
  EXPECT_EQ(read_tail(path, 5), "\xc3\xa9" "end");
  EXPECT_EQ(read_tail(dir.file("missing"), 10), "");
}

}  // namespace
}  // namespace gpubox::jobs
