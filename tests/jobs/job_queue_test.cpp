// JobQueue: FIFO order and the concurrency limit.
#include "agent/jobs/job_queue.h"

#include <gtest/gtest.h>

namespace gpubox::jobs {
namespace {

TEST(JobQueue, StartsInSubmissionOrderUpToTheLimit) {
  JobQueue queue(2, 10);
  ASSERT_TRUE(queue.push("a"));
  ASSERT_TRUE(queue.push("b"));
  ASSERT_TRUE(queue.push("c"));
  EXPECT_EQ(queue.pop_startable(), "a");
  EXPECT_EQ(queue.pop_startable(), "b");
  EXPECT_EQ(queue.pop_startable(), std::nullopt) << "two already run";
  EXPECT_EQ(queue.position("c"), 1u);
  queue.finished("a");
  EXPECT_EQ(queue.pop_startable(), "c");
  EXPECT_EQ(queue.running(), 2u);
  EXPECT_EQ(queue.waiting(), 0u);
}

TEST(JobQueue, DefaultLimitOfOneRunsJobsOneAtATime) {
  JobQueue queue(1, 10);
  for (const char* id : {"1", "2", "3"}) queue.push(id);
  EXPECT_EQ(queue.pop_startable(), "1");
  EXPECT_EQ(queue.pop_startable(), std::nullopt);
  queue.finished("1");
  EXPECT_EQ(queue.pop_startable(), "2");
  EXPECT_EQ(queue.position("3"), 1u);
}

TEST(JobQueue, RefusesBeyondTheWaitingCap) {
  JobQueue queue(1, 2);
  EXPECT_TRUE(queue.push("a"));
  EXPECT_TRUE(queue.push("b"));
  EXPECT_FALSE(queue.push("c"));
  EXPECT_EQ(queue.waiting(), 2u);
}

TEST(JobQueue, RemoveAndDrainKeepTheOthersInOrder) {
  JobQueue queue(1, 10);
  for (const char* id : {"a", "b", "c", "d"}) queue.push(id);
  EXPECT_TRUE(queue.remove_waiting("b"));
  EXPECT_FALSE(queue.remove_waiting("b"));
  EXPECT_EQ(queue.position("c"), 2u);
  EXPECT_EQ(queue.drain_waiting(), (std::vector<std::string>{"a", "c", "d"}));
  EXPECT_EQ(queue.pop_startable(), std::nullopt);
}

}  // namespace
}  // namespace gpubox::jobs
