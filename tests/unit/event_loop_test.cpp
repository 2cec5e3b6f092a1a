// agent/event_loop.h: timers in due order, cancel, cross-thread post, stop,
// and readable file descriptors. Real clock, but nothing waits on a sleep:
// the loop itself waits for the timers.
#include "agent/event_loop.h"

#include <gmock/gmock.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <set>
#include <string>
#include <thread>

namespace gpubox {
namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;

std::unique_ptr<EventLoop> make_loop() {
  auto loop = EventLoop::create();
  if (!loop) {
    ADD_FAILURE() << loop.status().to_string();
    return nullptr;
  }
  return std::move(*loop);
}

struct Pipe {
  Pipe() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) ADD_FAILURE() << "pipe2";
    read_end.reset(fds[0]);
    write_end.reset(fds[1]);
  }
  Fd read_end;
  Fd write_end;
};

TEST(EventLoop, TimersFireInDueOrderNotScheduleOrder) {
  auto loop = make_loop();
  ASSERT_TRUE(loop);
  std::vector<int> fired;
  std::vector<Timers::Clock::time_point> due;
  auto start = loop->now();
  auto add = [&](int tag, std::chrono::milliseconds delay) {
    loop->schedule(delay, [&, tag, delay] {
      fired.push_back(tag);
      EXPECT_GE(loop->now(), start + delay) << "timer " << tag << " fired early";
      if (fired.size() == 4) loop->stop();
    });
  };
  add(3, 60ms);
  add(1, 20ms);
  add(4, 80ms);
  add(2, 40ms);
  loop->run();
  EXPECT_THAT(fired, ElementsAre(1, 2, 3, 4));
}

TEST(EventLoop, TimersDueTogetherFireInScheduleOrder) {
  auto loop = make_loop();
  ASSERT_TRUE(loop);
  std::vector<int> fired;
  for (int i = 0; i < 5; ++i) loop->schedule(0ms, [&, i] { fired.push_back(i); });
  loop->schedule(5ms, [&] { loop->stop(); });
  loop->run();
  EXPECT_THAT(fired, ElementsAre(0, 1, 2, 3, 4));
}

TEST(EventLoop, TimerIdsAreUniqueAndNonZero) {
  auto loop = make_loop();
  ASSERT_TRUE(loop);
  std::set<Timers::TimerId> ids;
  for (int i = 0; i < 100; ++i) {
    auto id = loop->schedule(1h, [] {});
    EXPECT_NE(id, 0u);
    EXPECT_TRUE(ids.insert(id).second);
    loop->cancel(id);
  }
}

TEST(EventLoop, CancelledTimerNeverFires) {
  auto loop = make_loop();
  ASSERT_TRUE(loop);
  std::vector<std::string> fired;
  auto cancelled = loop->schedule(10ms, [&] { fired.push_back("cancelled"); });
  auto cancelled_by_timer = loop->schedule(30ms, [&] { fired.push_back("cancelled by timer"); });
  loop->schedule(20ms, [&] {
    fired.push_back("canceller");
    loop->cancel(cancelled_by_timer);
  });
  loop->schedule(50ms, [&] {
    fired.push_back("last");
    loop->stop();
  });
  loop->cancel(cancelled);
  loop->cancel(cancelled);   // twice: nothing
  loop->cancel(123456789);   // unknown: nothing
  loop->run();
  EXPECT_THAT(fired, ElementsAre("canceller", "last"));
}

TEST(EventLoop, TimerCanCancelATimerDueAtTheSameTime) {
  auto loop = make_loop();
  ASSERT_TRUE(loop);
  bool second_ran = false;
  Timers::TimerId second = 0;
  loop->schedule(0ms, [&] { loop->cancel(second); });
  second = loop->schedule(0ms, [&] { second_ran = true; });
  loop->schedule(5ms, [&] { loop->stop(); });
  loop->run();
  EXPECT_FALSE(second_ran);
}

TEST(EventLoop, PostFromAnotherThreadRunsOnTheLoopThreadInOrder) {
  auto loop = make_loop();
  ASSERT_TRUE(loop);
  constexpr int kPosts = 1000;
  std::vector<int> ran;
  std::vector<std::thread::id> threads;
  std::thread poster([&] {
    for (int i = 0; i < kPosts; ++i) {
      loop->post([&, i] {
        ran.push_back(i);
        threads.push_back(std::this_thread::get_id());
      });
    }
    loop->post([&] { loop->stop(); });
  });
  loop->run();
  poster.join();
  ASSERT_EQ(ran.size(), static_cast<size_t>(kPosts));
  for (int i = 0; i < kPosts; ++i) ASSERT_EQ(ran[i], i);
  for (const auto& id : threads) ASSERT_EQ(id, std::this_thread::get_id());
}

TEST(EventLoop, PostsFromSeveralThreadsKeepEachThreadsOrder) {
  auto loop = make_loop();
  ASSERT_TRUE(loop);
  constexpr int kThreads = 4;
  constexpr int kPosts = 500;
  std::vector<std::vector<int>> ran(kThreads);
  int finished = 0;
  std::vector<std::thread> posters;
  for (int t = 0; t < kThreads; ++t) {
    posters.emplace_back([&, t] {
      for (int i = 0; i < kPosts; ++i) loop->post([&, t, i] { ran[t].push_back(i); });
      loop->post([&] {
        if (++finished == kThreads) loop->stop();
      });
    });
  }
  loop->run();
  for (auto& poster : posters) poster.join();
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_EQ(ran[t].size(), static_cast<size_t>(kPosts));
    for (int i = 0; i < kPosts; ++i) ASSERT_EQ(ran[t][i], i) << "thread " << t;
  }
}

TEST(EventLoop, PostBeforeRunRunsFirst) {
  auto loop = make_loop();
  ASSERT_TRUE(loop);
  std::vector<std::string> order;
  loop->schedule(0ms, [&] {
    order.push_back("timer");
    loop->stop();
  });
  loop->post([&] { order.push_back("posted"); });
  loop->run();
  EXPECT_THAT(order, ElementsAre("posted", "timer"));
}

TEST(EventLoop, StopFromATimerReturnsAfterThatCallback) {
  auto loop = make_loop();
  ASSERT_TRUE(loop);
  std::vector<std::string> ran;
  loop->schedule(0ms, [&] {
    ran.push_back("stopper");
    loop->stop();
    ran.push_back("after stop, same callback");
  });
  loop->schedule(0ms, [&] { ran.push_back("due at once"); });
  loop->schedule(50ms, [&] { ran.push_back("later"); });
  loop->run();
  EXPECT_THAT(ran, ElementsAre("stopper", "after stop, same callback"));
}

TEST(EventLoop, StopFromAPostedCallbackEndsRun) {
  auto loop = make_loop();
  ASSERT_TRUE(loop);
  std::vector<int> ran;
  bool timer_ran = false;
  loop->schedule(50ms, [&] { timer_ran = true; });
  loop->post([&] { ran.push_back(1); });
  loop->post([&] {
    ran.push_back(2);
    loop->stop();
  });
  loop->run();
  EXPECT_THAT(ran, ElementsAre(1, 2));
  EXPECT_FALSE(timer_ran);
}

TEST(EventLoop, StopFromAnotherThreadEndsRun) {
  auto loop = make_loop();
  ASSERT_TRUE(loop);
  bool timer_ran = false;
  loop->schedule(1h, [&] { timer_ran = true; });
  std::thread stopper([&] { loop->stop(); });
  loop->run();  // would block for an hour if stop() were lost
  stopper.join();
  EXPECT_FALSE(timer_ran);
}

TEST(EventLoop, AddFdCallsBackWhenReadable) {
  auto loop = make_loop();
  ASSERT_TRUE(loop);
  Pipe pipe;
  std::string received;
  int calls = 0;
  bool written = false;
  ASSERT_TRUE(loop->add_fd(pipe.read_end.get(), [&] {
    ++calls;
    EXPECT_TRUE(written) << "called back before anything was written";
    char buffer[64];
    ssize_t n = ::read(pipe.read_end.get(), buffer, sizeof buffer);
    if (n > 0) received.append(buffer, static_cast<size_t>(n));
    if (received == "hello") loop->stop();
  }));
  // Nothing is readable for 20 ms: the callback must not run before then.
  loop->schedule(20ms, [&] {
    written = true;
    ASSERT_EQ(::write(pipe.write_end.get(), "hello", 5), 5);
  });
  loop->run();
  EXPECT_EQ(received, "hello");
  EXPECT_EQ(calls, 1);
}

TEST(EventLoop, AddFdFromAnotherThreadsWrite) {
  auto loop = make_loop();
  ASSERT_TRUE(loop);
  Pipe pipe;
  std::string received;
  ASSERT_TRUE(loop->add_fd(pipe.read_end.get(), [&] {
    char buffer[64];
    ssize_t n;
    while ((n = ::read(pipe.read_end.get(), buffer, sizeof buffer)) > 0) received.append(buffer, static_cast<size_t>(n));
    if (received.size() >= 3) loop->stop();
  }));
  std::thread writer([&] {
    for (char c : std::string("abc")) ASSERT_EQ(::write(pipe.write_end.get(), &c, 1), 1);
  });
  loop->run();
  writer.join();
  EXPECT_EQ(received, "abc");
}

TEST(EventLoop, RemovedFdIsNoLongerWatched) {
  auto loop = make_loop();
  ASSERT_TRUE(loop);
  Pipe first;
  Pipe second;
  int first_calls = 0;
  // The handler removes itself: the loop must not call it again.
  ASSERT_TRUE(loop->add_fd(first.read_end.get(), [&] {
    ++first_calls;
    loop->remove_fd(first.read_end.get());
  }));
  ASSERT_TRUE(loop->add_fd(second.read_end.get(), [&] {
    loop->remove_fd(second.read_end.get());
    loop->stop();
  }));
  ASSERT_EQ(::write(first.write_end.get(), "x", 1), 1);  // left unread: stays readable
  loop->schedule(20ms, [&] { ASSERT_EQ(::write(second.write_end.get(), "y", 1), 1); });
  loop->run();
  EXPECT_EQ(first_calls, 1);
}

TEST(EventLoop, AddFdOfABadFdIsAnError) {
  auto loop = make_loop();
  ASSERT_TRUE(loop);
  Status added = loop->add_fd(-1, [] {});
  EXPECT_FALSE(added);
  EXPECT_EQ(added.code(), ErrorCode::invalid_request);
  Pipe pipe;
  ASSERT_TRUE(loop->add_fd(pipe.read_end.get(), [] {}));
  Status twice = loop->add_fd(pipe.read_end.get(), [] {});
  EXPECT_EQ(twice.code(), ErrorCode::already_exists);
}

}  // namespace
}  // namespace gpubox
