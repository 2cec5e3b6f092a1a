// RankWorkers and RankExchange (model/modeld/split/): what a split model's
// ranks, threads of one process, hand each other, and how one rank's failure
// reaches every other rank at once instead of leaving it waiting. Values are
// small integers, exact whatever the order of their sums.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>

#include "model/modeld/split/rank_exchange.h"
#include "model/modeld/split/rank_workers.h"

namespace gpubox::modeld {
namespace {

const c10::Device kCpu(c10::kCPU);

TEST(RankWorkersTest, RunsEveryRankAtOnceRankZeroOnTheCallingThread) {
  RankWorkers workers(3);
  RankExchange exchange(3);
  std::atomic<int> ran{0};
  std::thread::id caller = std::this_thread::get_id(), rank0;
  for (int round = 0; round < 5; ++round) {
    workers.run([&](int rank) {
      if (rank == 0) rank0 = std::this_thread::get_id();
      exchange.arrive_and_wait();  // only passes when all three run at the same time
      ran += 1;
    });
  }
  EXPECT_EQ(ran.load(), 15);
  EXPECT_EQ(rank0, caller);
}

TEST(RankWorkersTest, RethrowsRankZerosExceptionElseTheLowestRanks) {
  RankWorkers workers(3);
  try {
    workers.run([](int rank) {
      if (rank == 2) throw std::runtime_error("two");
      if (rank == 1) throw std::runtime_error("one");
    });
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "one");
  }
  try {
    workers.run([](int rank) { throw std::runtime_error(rank == 0 ? "zero" : "other"); });
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "zero");
  }
  int after = 0;
  workers.run([&](int rank) { after += rank == 0; });  // still serves
  EXPECT_EQ(after, 1);
}

TEST(RankExchangeTest, GathersInRankOrderBroadcastsAndSums) {
  RankWorkers workers(2);
  RankExchange exchange(2);
  std::vector<at::Tensor> gathered[2], everywhere[2];
  at::Tensor given[2], sums[2];
  workers.run([&](int rank) {
    at::Tensor mine = at::full({2, 3}, static_cast<float>(rank + 1));
    gathered[rank] = exchange.gather(rank, mine, kCpu);
    everywhere[rank] = exchange.all_gather(rank, mine, kCpu);
    given[rank] = exchange.broadcast(rank, rank == 0 ? at::arange(4) : at::Tensor(), kCpu);
    sums[rank] = exchange.all_reduce_sum(rank, mine * 10, kCpu);
  });
  ASSERT_EQ(gathered[0].size(), 2u);
  EXPECT_TRUE(gathered[0][0].equal(at::full({2, 3}, 1.0f)));
  EXPECT_TRUE(gathered[0][1].equal(at::full({2, 3}, 2.0f)));
  EXPECT_TRUE(gathered[1].empty());  // only rank 0 gets them
  for (int rank : {0, 1}) {
    EXPECT_TRUE(everywhere[rank][1].equal(at::full({2, 3}, 2.0f)));
    EXPECT_TRUE(given[rank].equal(at::arange(4)));
    EXPECT_TRUE(sums[rank].equal(at::full({2, 3}, 30.0f)));
  }
}

TEST(RankExchangeTest, TheSumOfAPassRecordingGradientsReachesEveryRanksPart) {
  RankWorkers workers(2);
  RankExchange exchange(2);
  at::Tensor parts[2] = {at::ones({3}).requires_grad_(), at::ones({3}).requires_grad_()};
  at::Tensor sum;
  workers.run([&](int rank) {
    at::Tensor out = exchange.all_reduce_sum(rank, parts[rank] * (rank + 2), kCpu);
    if (rank == 0) sum = out;
  });
  sum.sum().backward();
  EXPECT_TRUE(parts[0].grad().equal(at::full({3}, 2.0f)));
  EXPECT_TRUE(parts[1].grad().equal(at::full({3}, 3.0f)));
}

TEST(RankExchangeTest, AFailedRankWakesEveryWaitingRankWithItsReason) {
  RankWorkers workers(3);
  RankExchange exchange(3);
  std::atomic<int> told{0};
  auto started = std::chrono::steady_clock::now();
  EXPECT_THROW(workers.run([&](int rank) {
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the others are waiting by now
      exchange.fail("rank 1 on cpu failed: injected");
      throw RankFailure(exchange.failure());
    }
    try {
      exchange.arrive_and_wait();
    } catch (const RankFailure& e) {
      if (std::string(e.what()) == "rank 1 on cpu failed: injected") told += 1;
      throw;
    }
  }), RankFailure);
  EXPECT_EQ(told.load(), 2);
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5));
  exchange.fail("a later reason");
  EXPECT_EQ(exchange.failure(), "rank 1 on cpu failed: injected");  // the first reason stays
  EXPECT_THROW(exchange.arrive_and_wait(), RankFailure);           // and every later pass is refused
}

TEST(RankExchangeTest, AnAbandonedPassEndsEveryRankAtTheSamePointAndTheNextPassRuns) {
  RankWorkers workers(2);
  RankExchange exchange(2);
  bool rank1_left = false;
  exchange.begin_pass();
  EXPECT_THROW(workers.run([&](int rank) {
    if (rank == 0) {
      exchange.abandon_pass();
      exchange.broadcast(0, at::Tensor(), kCpu);
      throw std::invalid_argument("the caller's op refused");
    }
    try {
      exchange.broadcast(1, at::Tensor(), kCpu);
    } catch (const PassAbandoned&) {
      rank1_left = true;
      throw;
    }
  }), std::invalid_argument);  // rank 0's own error reaches the caller
  EXPECT_TRUE(rank1_left);
  EXPECT_EQ(exchange.failure(), "");
  exchange.begin_pass();
  at::Tensor sums[2];
  workers.run([&](int rank) { sums[rank] = exchange.all_reduce_sum(rank, at::ones({1}), kCpu); });
  EXPECT_EQ(sums[1].item<float>(), 2.0f);
}

}  // namespace
}  // namespace gpubox::modeld
