// The model host's admission (model/modeld/scheduler/admission.h) and its block arena:
// first come first served within max_batch and the pool, the refusals, and
// blocks given back whole. (tests/fuzz/fuzz_admission.cpp drives it at random.)
#include "model/modeld/scheduler/admission.h"

#include <gtest/gtest.h>

namespace gpubox::modeld {
namespace {

TEST(BlockArena, TakesFirstFitAndMergesWhatComesBack) {
  BlockArena arena(10);
  EXPECT_EQ(arena.take(4), 0);
  EXPECT_EQ(arena.take(4), 4);
  EXPECT_EQ(arena.take(3), std::nullopt);  // 2 free
  arena.give(0, 4);
  EXPECT_EQ(arena.largest_free_run(), 4);
  arena.give(4, 4);
  EXPECT_EQ(arena.largest_free_run(), 10);  // merged with both neighbours
  EXPECT_EQ(arena.used(), 0);
  EXPECT_TRUE(arena.consistent());
}

TEST(Admission, TheHeadWaitsForRoomAndNothingOvertakesIt) {
  Admission admission(/*pool_blocks=*/8, /*max_batch=*/4, /*max_queue=*/8);
  ASSERT_EQ(admission.offer(1, 3, 2), Admission::Offer::queued);
  ASSERT_EQ(admission.offer(2, 2, 2), Admission::Offer::queued);  // 3 + 2 rows > max_batch 4
  ASSERT_EQ(admission.offer(3, 1, 1), Admission::Offer::queued);  // would fit, but comes after 2
  auto first = admission.start_head();
  ASSERT_TRUE(first);
  EXPECT_EQ(first->id, 1u);
  EXPECT_EQ(first->first_block, 0);
  EXPECT_FALSE(admission.start_head());
  EXPECT_EQ(admission.queue_depth(), 2);
  admission.release(1);
  EXPECT_EQ(admission.start_head()->id, 2u);
  EXPECT_EQ(admission.start_head()->id, 3u);
  EXPECT_EQ(admission.batch_rows(), 3);
  EXPECT_EQ(admission.blocks().used(), 3);
}

TEST(Admission, ARequestOfMoreRowsThanMaxBatchRunsWhenTheBatchIsEmpty) {
  Admission admission(8, 2, 8);
  ASSERT_EQ(admission.offer(1, 1, 1), Admission::Offer::queued);
  ASSERT_EQ(admission.offer(2, 5, 1), Admission::Offer::queued);
  EXPECT_EQ(admission.start_head()->id, 1u);
  EXPECT_FALSE(admission.start_head());
  admission.release(1);
  EXPECT_EQ(admission.start_head()->id, 2u);
  EXPECT_EQ(admission.batch_rows(), 5);
}

TEST(Admission, WorkAloneHoldsNothingAndStartsBesideABatch) {
  Admission admission(4, 1, 8);
  ASSERT_EQ(admission.offer(1, 1, 4), Admission::Offer::queued);
  ASSERT_EQ(admission.offer(2, 0, 0), Admission::Offer::queued);
  EXPECT_EQ(admission.start_head()->id, 1u);
  auto work = admission.start_head();
  ASSERT_TRUE(work);
  EXPECT_EQ(work->first_block, -1);
  admission.release(2);
  EXPECT_EQ(admission.blocks().used(), 4);
}

TEST(Admission, RefusesAFullQueueAndARequestLargerThanThePool) {
  Admission admission(4, 8, 1);
  EXPECT_EQ(admission.offer(1, 1, 5), Admission::Offer::too_large);
  EXPECT_EQ(admission.offer(2, 1, 4), Admission::Offer::queued);
  EXPECT_EQ(admission.offer(3, 1, 1), Admission::Offer::queue_full);
  EXPECT_TRUE(admission.withdraw(2));
  EXPECT_FALSE(admission.withdraw(2));
  EXPECT_EQ(admission.offer(3, 1, 1), Admission::Offer::queued);
  EXPECT_EQ(admission.queue_depth(), 1);
  EXPECT_EQ(admission.blocks().used(), 0);
}

}  // namespace
}  // namespace gpubox::modeld
