// The KV caches' budget of a GPU (model/modeld/scheduler/kv_budget.h) on a fake 80 GB
// device that refuses any allocation past its memory, as a GPU's allocator
// would: models loading together all fit, and the refusals name their numbers.
#include "model/modeld/scheduler/kv_budget.h"
#include "base/thread_annotations.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

namespace gpubox::modeld {
namespace {

constexpr std::uint64_t kGB = 1'000'000'000ull;

// A device of total bytes, others of them used by other processes; allocate() fails past the total.
class FakeDevice final : public DeviceMemory {
 public:
  FakeDevice(std::uint64_t total, std::uint64_t others) : total_(total), others_(others) {}
  std::uint64_t total_bytes(int) const override { return total_; }
  std::uint64_t used_bytes(int) const override {
    MutexLock lock(mutex_);
    return others_ + allocated_;
  }
  bool allocate(std::uint64_t bytes) {
    MutexLock lock(mutex_);
    if (others_ + allocated_ + bytes > total_) return false;
    allocated_ += bytes;
    return true;
  }

 private:
  const std::uint64_t total_, others_;
  mutable Mutex mutex_;
  std::uint64_t allocated_ GUARDED_BY(mutex_) = 0;
};

TEST(KvBudget, ModelsLoadingTogetherAllGetAPoolThatFits) {
  auto device = std::make_shared<FakeDevice>(80 * kGB, 2 * kGB);
  KvBudget budget(device);
  constexpr int kModels = 7;
  const std::uint64_t weights[kModels] = {16 * kGB, 1 * kGB, 3 * kGB, 200'000'000, 8 * kGB, 5 * kGB, 500'000'000};
  std::vector<std::unique_ptr<KvBudget::Share>> shares;
  for (int i = 0; i < kModels; ++i) shares.push_back(budget.join(0, "model" + std::to_string(i)));  // as add() does
  std::atomic<int> failures{0};
  std::atomic<std::uint64_t> pools{0};
  std::vector<std::thread> loaders;
  for (int i = 0; i < kModels; ++i) {
    loaders.emplace_back([&, i] {
      std::mt19937 random(static_cast<unsigned>(i));
      std::this_thread::sleep_for(std::chrono::milliseconds(random() % 40));  // loads finish in any order
      if (!device->allocate(weights[i])) ++failures;
      shares[static_cast<std::size_t>(i)]->weights_loaded(weights[i]);
      auto pool = shares[static_cast<std::size_t>(i)]->pool_bytes(std::nullopt, UINT64_MAX);
      if (!pool || !device->allocate(*pool)) {
        ++failures;
        return;
      }
      pools += *pool;
    });
  }
  for (auto& loader : loaders) loader.join();
  EXPECT_EQ(failures.load(), 0);
  std::uint64_t margin = 8 * kGB, budget_bytes = 80 * kGB - 2 * kGB - margin;
  std::uint64_t all_weights = 0;
  for (std::uint64_t w : weights) all_weights += w;
  EXPECT_LE(pools.load() + all_weights, budget_bytes);
  EXPECT_GE(pools.load() + all_weights, budget_bytes - kModels);  // the whole budget is handed out (rounding aside)
  EXPECT_LE(device->used_bytes(0), 80 * kGB - margin);          // the margin stays free for activations
  auto status = budget.status()["devices"][0];
  EXPECT_EQ(status["models"].size(), static_cast<std::size_t>(kModels));
  EXPECT_EQ(status["pools_bytes"].get<std::uint64_t>(), pools.load());
}

TEST(KvBudget, APoolWaitsForEveryModelStillLoadingWeights) {
  auto device = std::make_shared<FakeDevice>(80 * kGB, 0);
  KvBudget budget(device);
  auto first = budget.join(0, "first");
  auto second = budget.join(0, "second");
  first->weights_loaded(10 * kGB);
  std::atomic<bool> granted{false};
  std::uint64_t first_pool = 0;
  std::thread asking([&] {
    first_pool = first->pool_bytes(std::nullopt, UINT64_MAX).value();
    granted = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(granted.load());  // second's weights are not in place yet
  second->weights_loaded(30 * kGB);
  asking.join();
  std::uint64_t left = 80 * kGB - 8 * kGB - 40 * kGB;
  EXPECT_EQ(first_pool, left / 2);  // an equal share of what the weights left
  EXPECT_EQ(second->pool_bytes(std::nullopt, UINT64_MAX).value(), left - left / 2);
}

TEST(KvBudget, AFailedLoadStopsNobodyWaiting) {
  KvBudget budget(std::make_shared<FakeDevice>(80 * kGB, 0));
  auto waiting = budget.join(0, "waiting");
  auto failing = budget.join(0, "failing");
  waiting->weights_loaded(kGB);
  std::thread gone([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    failing.reset();  // its load failed: it leaves before its weights were in place
  });
  auto pool = waiting->pool_bytes(std::nullopt, UINT64_MAX);
  gone.join();
  ASSERT_TRUE(pool);
  EXPECT_EQ(*pool, 80 * kGB - 8 * kGB - kGB);
}

TEST(KvBudget, ADefaultPoolIsNoLargerThanTheModelCanUse) {
  KvBudget budget(std::make_shared<FakeDevice>(80 * kGB, 0));
  auto tiny = budget.join(0, "tiny");
  auto large = budget.join(0, "large");
  tiny->weights_loaded(1'000'000);
  large->weights_loaded(16 * kGB);
  EXPECT_EQ(tiny->pool_bytes(std::nullopt, 32 * KvBudget::kMiB).value(), 32 * KvBudget::kMiB);
  EXPECT_EQ(large->pool_bytes(std::nullopt, UINT64_MAX).value(), 80 * kGB - 8 * kGB - 16 * kGB - 1'000'000 - 32 * KvBudget::kMiB);
}

TEST(KvBudget, AnUnloadedModelGivesItsShareBackAndAReloadGetsIt) {
  auto device = std::make_shared<FakeDevice>(80 * kGB, 0);
  KvBudget budget(device);
  auto share = budget.join(0, "m");
  share->weights_loaded(16 * kGB);
  std::uint64_t pool = share->pool_bytes(std::nullopt, UINT64_MAX).value();
  device->allocate(16 * kGB + pool);  // the caching allocator keeps it after the unload: "used" to NVML
  share.reset();
  auto again = budget.join(0, "m");
  again->weights_loaded(16 * kGB);
  EXPECT_EQ(again->pool_bytes(std::nullopt, UINT64_MAX).value(), pool);  // not the 64 MiB floor
}

TEST(KvBudget, ASplitModelKeepsTheSmallestGrantAndTheRestGoesBack) {
  KvBudget budget(std::make_shared<FakeDevice>(80 * kGB, 0));
  auto resident = budget.join(1, "resident");  // cuda:1 already holds another model
  resident->weights_loaded(40 * kGB);
  ASSERT_TRUE(resident->pool_bytes(10 * kGB, UINT64_MAX));
  std::vector<std::unique_ptr<KvBudget::Share>> split;
  for (int device : {0, 1}) split.push_back(budget.join(device, "split"));
  std::uint64_t smallest = UINT64_MAX;
  for (auto& share : split) {
    share->weights_loaded(8 * kGB);
    smallest = std::min(smallest, share->pool_bytes(std::nullopt, UINT64_MAX).value());
  }
  EXPECT_EQ(smallest, 80 * kGB - 8 * kGB - 40 * kGB - 10 * kGB - 8 * kGB);  // cuda:1's
  for (auto& share : split) share->keep(smallest);
  EXPECT_EQ(budget.status()["devices"][0]["pools_bytes"].get<std::uint64_t>(), smallest);
  auto next = budget.join(0, "next");  // gets what cuda:0's larger grant held beyond the smallest
  next->weights_loaded(1 * kGB);
  EXPECT_EQ(next->pool_bytes(std::nullopt, UINT64_MAX).value(), 80 * kGB - 8 * kGB - 8 * kGB - smallest - 1 * kGB);
}

TEST(KvBudget, KvCacheMbBeyondTheDeviceIsRefusedNamingBothNumbers) {
  KvBudget budget(std::make_shared<FakeDevice>(80 * kGB, 0));
  auto share = budget.join(3, "big");
  share->weights_loaded(16 * kGB);
  auto refused = share->pool_bytes(std::uint64_t{100'000} * KvBudget::kMiB, UINT64_MAX);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.status().code(), ErrorCode::resource_exhausted);
  std::string message = refused.status().message();
  EXPECT_NE(message.find("kv_cache_mb 100000 MiB"), std::string::npos) << message;
  std::uint64_t left_mib = (80 * kGB - 8 * kGB - 16 * kGB) >> 20;
  EXPECT_NE(message.find("at most " + std::to_string(left_mib)), std::string::npos) << message;
  EXPECT_NE(message.find("cuda:3"), std::string::npos) << message;
  EXPECT_EQ(budget.status()["devices"][0]["pools_bytes"], 0);  // nothing granted
  EXPECT_EQ(share->pool_bytes(std::uint64_t{1000} * KvBudget::kMiB, UINT64_MAX).value(), 1000 * KvBudget::kMiB);
}

TEST(KvBudget, AModelThatCannotGetAPoolFailsWithTheReason) {
  KvBudget budget(std::make_shared<FakeDevice>(24 * kGB, 4 * kGB));
  auto share = budget.join(0, "too-big");
  share->weights_loaded(18 * kGB);  // 24 - 4 others - 2.4 margin leaves less than the weights
  auto refused = share->pool_bytes(std::nullopt, UINT64_MAX);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.status().code(), ErrorCode::resource_exhausted);
  EXPECT_NE(refused.status().message().find("no room for a KV cache"), std::string::npos);
  EXPECT_NE(refused.status().message().find("0 MiB left"), std::string::npos) << refused.status().message();
}

}  // namespace
}  // namespace gpubox::modeld
