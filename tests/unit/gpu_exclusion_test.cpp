// GpuWork and GpuExclusive (model/modeld/gpu/gpu_exclusion.h): a capture waits
// for the passes running, holds new ones off, and its own step passes.
#include "model/modeld/gpu/gpu_exclusion.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace gpubox::modeld {
namespace {

using std::chrono::milliseconds;

TEST(GpuExclusion, ACaptureWaitsForRunningWorkAndHoldsNewWorkOff) {
  std::atomic<int> stage{0};
  std::atomic<bool> captured{false}, second_work_ran{false};
  std::thread worker([&] {
    GpuWork work(true);
    stage = 1;
    std::this_thread::sleep_for(milliseconds(100));
    EXPECT_FALSE(captured.load());  // the capture waits for this pass
  });
  while (stage.load() < 1) std::this_thread::yield();
  std::thread capture([&] {
    GpuExclusive exclusive;
    captured = true;
    { GpuWork own_step(true); }  // the captured step's own passes do not wait for themselves
    std::this_thread::sleep_for(milliseconds(100));
    EXPECT_FALSE(second_work_ran.load());  // held off while the capture runs
    captured = false;
  });
  std::this_thread::sleep_for(milliseconds(30));
  std::thread late([&] {
    GpuWork work(true);
    second_work_ran = true;
    EXPECT_FALSE(captured.load());
  });
  worker.join();
  capture.join();
  late.join();
  EXPECT_TRUE(second_work_ran.load());
}

TEST(GpuExclusion, CpuWorkAndNestedWorkNeverWait) {
  GpuWork outer(true);
  GpuWork inner(true);  // nested on one thread: counted once
  std::atomic<bool> cpu_ran{false};
  std::thread cpu([&] {
    GpuWork on_cpu(false);
    cpu_ran = true;
  });
  cpu.join();
  EXPECT_TRUE(cpu_ran.load());
}

TEST(GpuExclusion, AThreadHoldingWorkCanTakeTheExclusiveHold) {
  std::atomic<bool> other_ran{false};
  std::thread other;
  {
    GpuWork work(true);
    GpuExclusive exclusive;  // waits only for other threads' work
    other = std::thread([&] {
      GpuWork blocked(true);
      other_ran = true;
    });
    std::this_thread::sleep_for(milliseconds(50));
    EXPECT_FALSE(other_ran.load());
  }
  other.join();
  EXPECT_TRUE(other_ran.load());
}

}  // namespace
}  // namespace gpubox::modeld
