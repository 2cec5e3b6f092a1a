// Journal and its replay: every transition survives, a torn last line is skipped,
// unfinished jobs are recognised.
#include "agent/jobs/journal.h"

#include <gtest/gtest.h>

#include "agent/jobs/journal_replay.h"
#include "tests/unit/temp_dir.h"

namespace gpubox::jobs {
namespace {

using nlohmann::json;

TEST(Journal, AppendsOneTimestampedLinePerEvent) {
  test::TempDir dir;
  auto journal = Journal::open(dir.file("events.jsonl"));
  ASSERT_TRUE(journal) << journal.status().message();
  ASSERT_TRUE((*journal)->append({{"event", "submitted"}, {"job", "job-1"}}).is_ok());
  ASSERT_TRUE((*journal)->append({{"event", "started"}, {"job", "job-1"}}).is_ok());
  auto events = read_journal(dir.file("events.jsonl"));
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1]["event"], "started");
  EXPECT_TRUE(events[0]["ts"].is_string());
  EXPECT_EQ(events[0]["ts"].get<std::string>().back(), 'Z');
}

TEST(Journal, ReopeningAppendsInsteadOfTruncating) {
  test::TempDir dir;
  ASSERT_TRUE(Journal::open(dir.file("j")).value()->append({{"event", "a"}}).is_ok());
  ASSERT_TRUE(Journal::open(dir.file("j")).value()->append({{"event", "b"}}).is_ok());
  EXPECT_EQ(read_journal(dir.file("j")).size(), 2u);
}

TEST(Journal, ReadSkipsATornLastLine) {
  test::TempDir dir;
  dir.write("j", "{\"event\":\"submitted\",\"job\":\"job-1\"}\n{\"event\":\"sta");
  int skipped = 0;
  auto events = read_journal(dir.file("j"), &skipped);
  EXPECT_EQ(events.size(), 1u);
  EXPECT_EQ(skipped, 1);
  EXPECT_TRUE(read_journal(dir.file("missing")).empty());
}

TEST(JournalReplay, FoldsEventsIntoEachJobsLastState) {
  std::vector<json> events = {
      {{"event", "submitted"}, {"job", "job-1"}, {"spec", {{"command", "a"}}}, {"submitted_unix", 5.0}},
      {{"event", "submitted"}, {"job", "job-2"}, {"spec", {{"command", "b"}}}},
      {{"event", "submitted"}, {"job", "job-3"}, {"spec", {{"command", "c"}}}},
      {{"event", "submitted"}, {"job", "job-12"}, {"spec", {{"command", "d"}}}},
      {{"event", "started"}, {"job", "job-1"}, {"pid", 10}},
      {{"event", "started"}, {"job", "job-2"}, {"pid", 11}},
      {{"event", "exited"}, {"job", "job-1"}, {"exit_code", 0}},
      {{"event", "finished"}, {"job", "job-1"}, {"result", {{"status", "succeeded"}}}, {"manifest", {{"files", json::array()}}}},
      {{"event", "acked"}, {"job", "job-1"}},
      {{"event", "stopping"}, {"job", "job-3"}, {"reason", "cancel"}},
      {{"event", "persisted"}, {"job", "job-1"}, {"path", "/vol/job-1"}},
      {{"event", "started"}, {"job", "job-99"}},  // no submission: ignored
      {{"event", "finished"}, {"job", "job-12"}, {"result", 5}, {"manifest", "x"}},  // wrong shapes: kept as they are
      {{"event", "submitted"}, {"job", "job-13"}, {"submitted_unix", "not a number"}},  // throws inside: skipped
  };
  Replay replay = replay_journal(events);
  ASSERT_EQ(replay.jobs.size(), 4u) << "job-13's malformed submission is skipped";
  EXPECT_EQ(replay.last_number, 99) << "ids are never reused, even of torn submissions";
  const auto& done = replay.jobs.at("job-1");
  EXPECT_EQ(done.state, "finished");
  EXPECT_EQ(done.result["status"], "succeeded");
  EXPECT_TRUE(done.acked);
  EXPECT_EQ(done.persisted_to, "/vol/job-1");
  EXPECT_EQ(done.submitted_unix, 5.0);
  EXPECT_EQ(replay.jobs.at("job-2").state, "running");
  EXPECT_TRUE(is_unfinished_state(replay.jobs.at("job-2").state));
  EXPECT_EQ(replay.jobs.at("job-3").state, "queued") << "a queued job being stopped is still queued";
  EXPECT_EQ(replay.jobs.at("job-12").spec["command"], "d");
  EXPECT_EQ(replay.jobs.at("job-12").state, "finished");
  EXPECT_FALSE(is_unfinished_state("finished"));
}

}  // namespace
}  // namespace gpubox::jobs
