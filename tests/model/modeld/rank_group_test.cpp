// connect_ranks and all_reduce_sum (model/modeld/split/rank_group.h) on CPU
// ranks over Gloo, each rank on a thread of its own as in modeld, against
// sums made here; and the devices connect_ranks refuses, with why. Values are
// integers (exact in float and bf16 whatever order Gloo adds in) or two ranks'
// floats (one addition, exact either way round).
#include "model/modeld/split/rank_group.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <functional>
#include <thread>

#include "model/modeld/gpu/beside_executable.h"
#include "model/modeld/gpu/cuda_runtime.h"
#include "model/modeld/split/nccl_ranks.h"
#include "tests/prerequisite.h"

namespace gpubox::modeld {
namespace {

using namespace std::chrono_literals;
using Ranks = std::vector<std::unique_ptr<RankCollectives>>;

Ranks connect_cpu(int count, std::chrono::milliseconds timeout = 30s) {
  auto ranks = connect_ranks(std::vector<c10::Device>(static_cast<std::size_t>(count), c10::Device(c10::kCPU)), timeout);
  EXPECT_TRUE(ranks.is_ok()) << ranks.status().to_string();
  if (!ranks) return {};
  EXPECT_EQ(ranks->size(), static_cast<std::size_t>(count));
  return std::move(ranks).value();
}

// Runs body(rank, its end) on a thread per rank, as modeld's ranks do; what a rank threw, rethrown here.
void on_each_rank(Ranks& ranks, const std::function<void(int, RankCollectives&)>& body) {
  std::vector<std::exception_ptr> thrown(ranks.size());
  std::vector<std::thread> threads;
  for (std::size_t rank = 0; rank < ranks.size(); ++rank) {
    threads.emplace_back([&, rank] {
      try {
        body(static_cast<int>(rank), *ranks[rank]);
      } catch (...) {
        thrown[rank] = std::current_exception();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const std::exception_ptr& e : thrown) {
    if (e) std::rethrow_exception(e);
  }
}

// Rank r's tensor: integers that differ per element and per rank, so a sum of the wrong ranks or elements shows.
at::Tensor rank_values(int rank, std::int64_t n, at::ScalarType dtype, int step = 0) {
  return ((at::arange(n, at::kLong) * (rank + 1) + 7 * rank + 3 * step) % 61 - 30).to(dtype);
}

at::Tensor expected_sum(int ranks, std::int64_t n, at::ScalarType dtype, int step = 0) {
  at::Tensor sum = at::zeros({n}, at::kLong);
  for (int r = 0; r < ranks; ++r) sum += rank_values(r, n, at::kLong, step);
  return sum.to(dtype);
}

TEST(RankGroup, TwoCpuRanksSumExactlyOnBothRanks) {
  Ranks ranks = connect_cpu(2);
  ASSERT_EQ(ranks.size(), 2u);
  std::vector<at::Tensor> results(2);
  constexpr int kTimed = 200;  // the decoder's hot path: one per attention and one per MLP
  std::vector<double> microseconds(kTimed);
  on_each_rank(ranks, [&](int rank, RankCollectives& group) {
    at::Tensor t = rank_values(rank, 4096, at::kFloat);
    group.all_reduce_sum(t);
    results[rank] = t.clone();
    for (int i = 0; i < kTimed; ++i) {
      auto start = std::chrono::steady_clock::now();
      group.all_reduce_sum(t);
      if (rank == 0) microseconds[i] = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
    }
  });
  at::Tensor expected = expected_sum(2, 4096, at::kFloat);
  EXPECT_TRUE(at::equal(results[0], expected));
  EXPECT_TRUE(at::equal(results[1], expected));
  std::sort(microseconds.begin(), microseconds.end());
  std::printf("all_reduce_sum of 4096 floats (16 KiB), 2 Gloo ranks, %d calls: min %.0f us, median %.0f us, max %.0f us\n",
              kTimed, microseconds.front(), microseconds[kTimed / 2], microseconds.back());
}

TEST(RankGroup, ThreeRanksGiveEachCollectiveItsOwnSumInBf16AndFloat) {
  Ranks ranks = connect_cpu(3);
  ASSERT_EQ(ranks.size(), 3u);
  constexpr int kSteps = 12;
  constexpr std::int64_t kWidth = 768;
  std::vector<std::vector<at::Tensor>> results(3);
  on_each_rank(ranks, [&](int rank, RankCollectives& group) {
    for (int step = 0; step < kSteps; ++step) {
      at::Tensor t = rank_values(rank, kWidth, step % 2 ? at::kFloat : at::kBFloat16, step);
      group.all_reduce_sum(t);
      results[rank].push_back(t);
    }
  });
  for (int rank = 0; rank < 3; ++rank) {
    ASSERT_EQ(results[rank].size(), static_cast<std::size_t>(kSteps));
    for (int step = 0; step < kSteps; ++step) {
      at::ScalarType dtype = step % 2 ? at::kFloat : at::kBFloat16;
      EXPECT_EQ(results[rank][step].scalar_type(), dtype);
      EXPECT_TRUE(at::equal(results[rank][step], expected_sum(3, kWidth, dtype, step)))
          << "rank " << rank << ", collective " << step;
    }
  }
}

TEST(RankGroup, FourMebibytesSumElementwise) {
  Ranks ranks = connect_cpu(2);
  ASSERT_EQ(ranks.size(), 2u);
  constexpr std::int64_t kFloats = 1 << 20;  // 4 MiB
  std::vector<at::Tensor> inputs(2), results(2);
  for (int rank = 0; rank < 2; ++rank) {
    at::Generator generator = at::detail::createCPUGenerator(100 + rank);
    inputs[rank] = at::randn({kFloats}, generator, at::kFloat);  // two ranks: one addition, exact in float
  }
  on_each_rank(ranks, [&](int rank, RankCollectives& group) {
    at::Tensor t = inputs[rank].clone();
    group.all_reduce_sum(t);
    results[rank] = t;
  });
  at::Tensor expected = inputs[0] + inputs[1];
  EXPECT_TRUE(at::equal(results[0], expected));
  EXPECT_TRUE(at::equal(results[1], expected));
  EXPECT_FALSE(at::equal(results[0], inputs[0]));  // something was added
}

TEST(RankGroup, TwoGroupsInOneProcessStayApart) {
  Ranks first = connect_cpu(2), second = connect_cpu(2);
  ASSERT_EQ(first.size(), 2u);
  ASSERT_EQ(second.size(), 2u);
  std::vector<at::Tensor> a(2), b(2);
  std::thread other([&] {
    on_each_rank(second, [&](int rank, RankCollectives& group) {
      b[rank] = at::full({64}, 100.0f * static_cast<float>(rank + 1));
      group.all_reduce_sum(b[rank]);
    });
  });
  on_each_rank(first, [&](int rank, RankCollectives& group) {
    a[rank] = at::full({64}, static_cast<float>(rank + 1));
    group.all_reduce_sum(a[rank]);
  });
  other.join();
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_TRUE(at::equal(a[rank], at::full({64}, 3.0f)));
    EXPECT_TRUE(at::equal(b[rank], at::full({64}, 300.0f)));
  }
}

TEST(RankGroup, OneRankIsItsOwnSum) {
  Ranks ranks = connect_cpu(1);
  ASSERT_EQ(ranks.size(), 1u);
  at::Tensor t = rank_values(0, 100, at::kFloat);
  ranks[0]->all_reduce_sum(t);
  EXPECT_TRUE(at::equal(t, rank_values(0, 100, at::kFloat)));
}

TEST(RankGroup, ARankThatNeverArrivesMakesTheOtherThrowWithinTheTimeout) {
  Ranks ranks = connect_cpu(2, 2s);
  ASSERT_EQ(ranks.size(), 2u);
  auto start = std::chrono::steady_clock::now();
  at::Tensor t = at::ones({1024});
  EXPECT_THROW(ranks[0]->all_reduce_sum(t), c10::Error);  // rank 1 never calls
  auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, 1500ms);  // it did wait for rank 1
  EXPECT_LT(waited, 15s);     // and gave up near the timeout, not never
}

// A rank that failed elsewhere never reaches the all-reduce: give_up ends the others' wait at
// once instead of at the group's timeout (the decoder asks whether its exchange is broken).
TEST(RankGroup, GivingUpEndsTheWaitLongBeforeTheTimeout) {
  Ranks ranks = connect_cpu(2, 3s);
  ASSERT_EQ(ranks.size(), 2u);
  auto start = std::chrono::steady_clock::now();
  int asked = 0;
  at::Tensor t = at::ones({1024});
  EXPECT_THROW(ranks[0]->all_reduce_sum(t, [&] {
    ++asked;
    return std::chrono::steady_clock::now() - start > 100ms;
  }), c10::Error);  // rank 1 never calls
  auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, 100ms);
  EXPECT_LT(waited, 1s);  // not the 3 s timeout
  EXPECT_GE(asked, 2);    // asked while it waited, not once
}

TEST(RankGroup, ATensorThatIsNotContiguousIsRefused) {
  Ranks ranks = connect_cpu(2);
  ASSERT_EQ(ranks.size(), 2u);
  EXPECT_THROW(on_each_rank(ranks,
                            [](int, RankCollectives& group) {
                              at::Tensor t = at::ones({8, 8}).t();
                              group.all_reduce_sum(t);
                            }),
               c10::Error);
}

Status connect_status(const std::vector<c10::Device>& devices, std::chrono::milliseconds timeout = 5s) {
  return connect_ranks(devices, timeout).status();
}

TEST(RankGroup, BadDevicesAreInvalidRequestsThatSayWhy) {
  c10::Device cpu(c10::kCPU), cuda0(c10::kCUDA, 0), cuda1(c10::kCUDA, 1);
  Status none = connect_status({});
  EXPECT_EQ(none.code(), ErrorCode::invalid_request);
  EXPECT_NE(none.message().find("at least one device"), std::string::npos) << none.message();

  Status mixed = connect_status({cpu, cuda0});
  EXPECT_EQ(mixed.code(), ErrorCode::invalid_request);
  EXPECT_NE(mixed.message().find("not a mix (cpu, cuda:0)"), std::string::npos) << mixed.message();

  Status twice = connect_status({cuda0, cuda1, cuda0});
  EXPECT_EQ(twice.code(), ErrorCode::invalid_request);
  EXPECT_NE(twice.message().find("cuda:0 is named twice"), std::string::npos) << twice.message();

  Status no_index = connect_status({c10::Device(c10::kCUDA), cuda1});
  EXPECT_EQ(no_index.code(), ErrorCode::invalid_request);
  EXPECT_NE(no_index.message().find("need an index"), std::string::npos) << no_index.message();

  Status meta = connect_status({c10::Device(c10::kMeta)});
  EXPECT_EQ(meta.code(), ErrorCode::invalid_request);
  EXPECT_NE(meta.message().find("not meta"), std::string::npos) << meta.message();

  Status no_timeout = connect_status({cpu, cpu}, 0ms);
  EXPECT_EQ(no_timeout.code(), ErrorCode::invalid_request);
  EXPECT_NE(no_timeout.message().find("timeout must be positive"), std::string::npos) << no_timeout.message();
}

// Here (no GPU) CUDA ranks are an error that names NCCL and why, never a crash; on a
// machine with two GPUs they connect (the device tests run them).
TEST(RankGroup, CudaRanksWithoutTheirGpusAreAnError) {
  auto ranks = connect_ranks({c10::Device(c10::kCUDA, 0), c10::Device(c10::kCUDA, 1)}, 5s);
  if (ranks) GTEST_SKIP() << "this machine has two GPUs and NCCL";
  EXPECT_NE(ranks.status().code(), ErrorCode::ok);
  EXPECT_NE(ranks.status().message().find("NCCL"), std::string::npos) << ranks.status().message();
  std::printf("cuda:0 and cuda:1 here: %s\n", ranks.status().to_string().c_str());
}

// libgpubox_nccl_ranks.so, beside this test as beside modeld, loads into a process linked to
// libtorch_cpu only, exports the entry point of nccl_ranks.h, and hands back its failure on a
// GPU-less machine (CUDA's, before ProcessGroupNCCL's) as an error, not an exception across the boundary.
TEST(RankGroup, TheNcclLibraryLoadsAndFailsCleanlyWithoutAGpu) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "this machine has a GPU: NCCL ranks are the device tests'";
  std::string error;
  void* entry = load_beside_executable(kNcclRanksLibrary, kConnectNcclRankSymbol, error);
  if (!entry) GPUBOX_MISSING(error << " (built where the torch wheel's CUDA runtime headers and nccl.h are)");
  c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::HashStore>();
  RankCollectives* made = reinterpret_cast<ConnectNcclRankFunction>(entry)(&store, 0, 1, 0, 2000, &error);
  EXPECT_EQ(made, nullptr);
  delete made;
  EXPECT_FALSE(error.empty());
  std::printf("ProcessGroupNCCL here: %s\n", error.c_str());
}

}  // namespace
}  // namespace gpubox::modeld
