// FnRunner (model/modeld/interventions/fn_runner.h): work that ends is waited for; work
// that does not end by its stop or limit is abandoned, its caller answered at
// once, and the next run gets a thread of its own.
#include "model/modeld/interventions/fn_runner.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace gpubox::modeld {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

TEST(FnRunner, WorkThatEndsIsWaitedFor) {
  FnRunner runner;
  int value = 0;
  EXPECT_TRUE(runner.run([&value] { value = 42; }, {}, milliseconds(1000)));
  EXPECT_EQ(value, 42);
  EXPECT_TRUE(runner.run([&value] { value += 1; }, [] { return Status::ok(); }, milliseconds(1000)));
  EXPECT_EQ(value, 43);  // the same thread serves the next run
}

TEST(FnRunner, WorkPastItsStopIsAbandonedAndTheCallerGoesOn) {
  FnRunner runner;
  auto release = std::make_shared<std::atomic<bool>>(false);
  std::int64_t before = FnRunner::abandoned_running();
  auto deadline = Clock::now() + milliseconds(100);
  auto stop = [deadline] {
    return Clock::now() < deadline ? Status::ok() : Status(ErrorCode::deadline_exceeded, "past the deadline");
  };
  auto started = Clock::now();
  Status ended = runner.run([release] { while (!*release) std::this_thread::sleep_for(milliseconds(5)); }, stop,
                            milliseconds(10000));
  EXPECT_LT(Clock::now() - started, milliseconds(1000));
  EXPECT_EQ(ended.code(), ErrorCode::deadline_exceeded);
  EXPECT_EQ(ended.message(), "past the deadline");
  EXPECT_EQ(FnRunner::abandoned_running(), before + 1);
  int value = 0;
  EXPECT_TRUE(runner.run([&value] { value = 7; }, {}, milliseconds(1000)));  // a fresh thread
  EXPECT_EQ(value, 7);
  *release = true;  // the abandoned work ends in its own time
  for (int i = 0; i < 200 && FnRunner::abandoned_running() != before; ++i) std::this_thread::sleep_for(milliseconds(10));
  EXPECT_EQ(FnRunner::abandoned_running(), before);
}

TEST(FnRunner, WorkPastTheLimitIsAbandonedWithoutAStop) {
  FnRunner runner;
  auto release = std::make_shared<std::atomic<bool>>(false);
  Status ended = runner.run([release] { while (!*release) std::this_thread::sleep_for(milliseconds(5)); }, {},
                            milliseconds(50));
  EXPECT_EQ(ended.code(), ErrorCode::deadline_exceeded);
  EXPECT_NE(ended.message().find("one function call may run 0.05 s"), std::string::npos) << ended.message();
  *release = true;
}

}  // namespace
}  // namespace gpubox::modeld
