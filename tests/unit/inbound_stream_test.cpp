// rpc::InboundStream (rpc/inbound_stream.h): the client's DATA as a method
// reads them, over a CallState the test feeds as the server's I/O thread
// would (CallState::deliver, CallState::stop) and a Send that records the
// CREDIT messages the stream grants.
#include <poll.h>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "rpc/inbound_stream.h"

namespace gpubox::rpc {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

class InboundStreamTest : public ::testing::Test {
 protected:
  InboundStreamTest()
      : state_(std::make_shared<CallState>(7, "t.upload", std::nullopt, kDefaultWindow)),
        call_(state_, json::object(), {}, "local", [this](Outgoing&& out) { sent_.push_back(std::move(out)); }) {}

  // The credit of every CREDIT sent so far, in order.
  std::vector<std::uint64_t> grants() const {
    std::vector<std::uint64_t> credits;
    for (const auto& out : sent_) {
      EXPECT_EQ(out.header.kind, Kind::credit);
      EXPECT_EQ(out.header.id, 7u);
      credits.push_back(out.header.credit);
    }
    return credits;
  }
  bool deliver(int n) { return state_->deliver(Incoming{json{{"n", n}}, {}}); }
  static bool readable(int fd) {
    pollfd item{fd, POLLIN, 0};
    return ::poll(&item, 1, 0) == 1 && (item.revents & POLLIN);
  }

  std::shared_ptr<CallState> state_;
  std::vector<Outgoing> sent_;
  CallContext call_;
};

TEST_F(InboundStreamTest, GrantsTheWindowWhenOpened) {
  InboundStream stream(call_, {.window = 8});
  EXPECT_EQ(grants(), std::vector<std::uint64_t>{8});
}

TEST_F(InboundStreamTest, BuffersNoMoreThanTheWindow) {
  InboundStream stream(call_, {.window = 3});
  EXPECT_TRUE(deliver(1));
  EXPECT_TRUE(deliver(2));
  EXPECT_TRUE(deliver(3));
  EXPECT_FALSE(deliver(4)) << "DATA beyond the credit granted must be refused (the server then fails the call)";
}

TEST_F(InboundStreamTest, GrantsBackEachHalfWindowOnceConsumed) {
  InboundStream stream(call_, {.window = 4});
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(deliver(i));
  auto first = stream.try_next();
  ASSERT_TRUE(first.is_ok() && first->has_value());
  EXPECT_EQ((**first).body["n"], 0);
  EXPECT_EQ(grants(), std::vector<std::uint64_t>{4}) << "an item taken is not consumed until the method comes back";
  ASSERT_TRUE(stream.try_next()->has_value());
  EXPECT_EQ(grants(), std::vector<std::uint64_t>{4}) << "one consumed: below the batch of 2";
  ASSERT_TRUE(stream.try_next()->has_value());
  EXPECT_EQ(grants(), (std::vector<std::uint64_t>{4, 2}));
  EXPECT_TRUE(deliver(4));
  EXPECT_TRUE(deliver(5));
  EXPECT_FALSE(deliver(6)) << "only the 2 granted back may come";
}

TEST_F(InboundStreamTest, ACreditBatchOfOneGrantsEachItemBack) {
  InboundStream stream(call_, {.window = 2, .credit_batch = 1});
  ASSERT_TRUE(deliver(0));
  ASSERT_TRUE(stream.try_next()->has_value());
  EXPECT_FALSE(stream.try_next()->has_value());
  EXPECT_EQ(grants(), (std::vector<std::uint64_t>{2, 1}));
}

TEST_F(InboundStreamTest, PollFdIsReadableWhileDataIsQueued) {
  InboundStream stream(call_, {.window = 4});
  EXPECT_FALSE(readable(stream.poll_fd()));
  ASSERT_TRUE(deliver(0));
  ASSERT_TRUE(deliver(1));
  EXPECT_TRUE(readable(stream.poll_fd()));
  ASSERT_TRUE(stream.try_next()->has_value());
  EXPECT_TRUE(readable(stream.poll_fd())) << "one is still queued";
  ASSERT_TRUE(stream.try_next()->has_value());
  EXPECT_FALSE(readable(stream.poll_fd()));
  EXPECT_EQ(stream.poll_item().fd, stream.poll_fd());
}

TEST_F(InboundStreamTest, PollFdCreatedLateSeesWhatIsAlreadyQueued) {
  InboundStream stream(call_, {.window = 4});
  ASSERT_TRUE(deliver(0));
  EXPECT_TRUE(readable(stream.poll_fd()));
}

TEST_F(InboundStreamTest, TryNextNeverWaits) {
  InboundStream stream(call_, {.window = 4});
  auto none = stream.try_next();
  ASSERT_TRUE(none.is_ok());
  EXPECT_FALSE(none->has_value());
}

TEST_F(InboundStreamTest, NextWithinWakesOnDataFromAnotherThread) {
  InboundStream stream(call_, {.window = 4});
  std::thread io([this] {
    std::this_thread::sleep_for(20ms);
    deliver(9);
  });
  auto got = stream.next_within(10s);
  io.join();
  ASSERT_TRUE(got.is_ok() && got->has_value());
  EXPECT_EQ((**got).body["n"], 9);
}

TEST_F(InboundStreamTest, FailsWithTheStopReasonOnceStopped) {
  InboundStream stream(call_, {.window = 4});
  ASSERT_TRUE(deliver(0));
  state_->stop(Status(ErrorCode::cancelled, "cancelled by the client"));
  auto got = stream.try_next();
  ASSERT_FALSE(got.is_ok());
  EXPECT_EQ(got.status().code(), ErrorCode::cancelled);
}

TEST_F(InboundStreamTest, NextWithinWakesOnStop) {
  InboundStream stream(call_, {.window = 4});
  std::thread io([this] {
    std::this_thread::sleep_for(20ms);
    state_->stop(Status(ErrorCode::deadline_exceeded, "the request ran past its deadline"));
  });
  auto started = std::chrono::steady_clock::now();
  auto got = stream.next_within(10s);
  io.join();
  ASSERT_FALSE(got.is_ok());
  EXPECT_EQ(got.status().code(), ErrorCode::deadline_exceeded);
  EXPECT_LT(std::chrono::steady_clock::now() - started, 5s);
}

TEST_F(InboundStreamTest, GrantsNothingOnceTheCallEnded) {
  InboundStream stream(call_, {.window = 2, .credit_batch = 1});
  ASSERT_TRUE(deliver(0));
  ASSERT_TRUE(stream.try_next()->has_value());
  ASSERT_TRUE(state_->finish());
  (void)stream.try_next();
  EXPECT_EQ(grants(), std::vector<std::uint64_t>{2});
}

TEST_F(InboundStreamTest, ReadAllTakesItemsUntilTheMethodSaysEnd) {
  InboundStream stream(call_, {.window = 4});
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(deliver(i));
  std::vector<int> seen;
  Status read = stream.read_all(10s, "abandoned", [&](Incoming& item) -> Result<bool> {
    seen.push_back(item.body["n"].get<int>());
    return seen.size() == 2;
  });
  EXPECT_TRUE(read.is_ok());
  EXPECT_EQ(seen, (std::vector<int>{0, 1}));
  EXPECT_EQ(grants(), std::vector<std::uint64_t>{4}) << "the last item is the end: not granted back";
}

TEST_F(InboundStreamTest, ReadAllReturnsTheItemsError) {
  InboundStream stream(call_, {.window = 4});
  ASSERT_TRUE(deliver(0));
  Status read = stream.read_all(10s, "abandoned", [](Incoming&) -> Result<bool> {
    return Status(ErrorCode::input_changed, "too many bytes");
  });
  EXPECT_EQ(read.code(), ErrorCode::input_changed);
}

TEST_F(InboundStreamTest, ReadAllEndsAnIdleStream) {
  InboundStream stream(call_, {.window = 4});
  Status read = stream.read_all(std::chrono::seconds(0), "the upload was abandoned",
                                [](Incoming&) -> Result<bool> { return false; });
  EXPECT_EQ(read.code(), ErrorCode::deadline_exceeded);
  EXPECT_EQ(read.message(), "no DATA for 0 s; the upload was abandoned");
}

TEST_F(InboundStreamTest, ARelayMatchesTheNextHopsCredit) {
  InboundStream stream(call_, {.window = 0});
  EXPECT_TRUE(grants().empty()) << "no window of its own";
  stream.match_credit(4);
  EXPECT_EQ(grants(), std::vector<std::uint64_t>{4});
  stream.match_credit(4);
  EXPECT_EQ(grants(), std::vector<std::uint64_t>{4}) << "the client already holds 4";
  ASSERT_TRUE(deliver(0));
  stream.match_credit(4);
  EXPECT_EQ(grants(), std::vector<std::uint64_t>{4}) << "a queued item still counts as held";
  ASSERT_TRUE(stream.try_next()->has_value());  // forwarded: the next hop now has 3
  stream.match_credit(3);
  EXPECT_FALSE(stream.try_next()->has_value());
  EXPECT_EQ(grants(), std::vector<std::uint64_t>{4}) << "a relay grants nothing back on consuming";
  stream.match_credit(5);
  EXPECT_EQ(grants(), (std::vector<std::uint64_t>{4, 2}));
  stream.match_credit(1);
  EXPECT_EQ(grants(), (std::vector<std::uint64_t>{4, 2})) << "credit is never taken back";
}

}  // namespace
}  // namespace gpubox::rpc
