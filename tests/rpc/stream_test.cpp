// rpc::Stream against a fake agent: a ROUTER socket this test drives by hand
// on an ipc:// path, all on the test's thread. Checks polling beside another
// descriptor, try_next() without a frame, credit granted as items are
// consumed, and the ends of a stream (RESULT, ERROR, a bad frame, CANCEL).
#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "rpc/client.h"
#include "rpc/protocol.h"

namespace gpubox::rpc {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;

// Bounds how long a broken client takes to fail a test; nothing waits this long when it works.
constexpr milliseconds kAnswer{10'000};

// One message the fake agent received: its header and body.
struct Got {
  Header header;
  json body;
  std::size_t attachments = 0;
};

// The agent's side of one connection: a ROUTER bound to a fresh ipc path.
class FakeAgent {
 public:
  FakeAgent() {
    std::string pattern = (std::filesystem::temp_directory_path() / "gpubox-stream-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) ADD_FAILURE() << "mkdtemp failed";
    dir_ = pattern;
    endpoint_ = "ipc://" + dir_ + "/agent.sock";
    router_.set(zmq::sockopt::linger, 0);
    router_.bind(endpoint_);
  }
  ~FakeAgent() {
    router_.close();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  std::unique_ptr<Client> connect() {
    ClientOptions options;
    options.endpoint = endpoint_;
    auto client = Client::connect(options);
    EXPECT_TRUE(client) << client.status().to_string();
    return client ? std::move(*client) : nullptr;
  }

  // The next message from the client (it remembers the client's routing id).
  std::optional<Got> receive() {
    zmq::pollitem_t item{router_.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, kAnswer) == 0) return std::nullopt;
    std::vector<zmq::message_t> frames;
    if (!zmq::recv_multipart(router_, std::back_inserter(frames)) || frames.size() < 3) return std::nullopt;
    peer_ = frames[0].to_string();
    auto header = decode_header(frames[1].to_string_view());
    auto body = decode_body(frames[2].to_string_view(), SIZE_MAX);
    if (!header || !body) return std::nullopt;
    return Got{*header, *body, frames.size() - 3};
  }

  void send(std::uint64_t id, Kind kind, const json& body = json::object(), std::uint64_t credit = 0,
            std::vector<std::string> attachments = {}) {
    Header header;
    header.id = id;
    header.kind = kind;
    header.credit = credit;
    send_frames({encode_header(header), encode_body(body)}, std::move(attachments));
  }

  void send_frames(std::vector<std::string> parts, std::vector<std::string> attachments = {}) {
    std::vector<zmq::message_t> frames;
    frames.emplace_back(peer_.data(), peer_.size());
    for (auto& part : parts) frames.emplace_back(part.data(), part.size());
    for (auto& part : attachments) frames.emplace_back(part.data(), part.size());
    ASSERT_TRUE(zmq::send_multipart(router_, frames));
  }

 private:
  std::string dir_;
  std::string endpoint_;
  zmq::context_t context_{1};
  zmq::socket_t router_{context_, zmq::socket_type::router};
  std::string peer_;
};

class StreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    client_ = agent_.connect();
    ASSERT_TRUE(client_);
  }

  // Opens a stream and takes its CALL at the agent.
  std::unique_ptr<Stream> open(CallOptions options = {}) {
    auto stream = client_->stream("test.stream", json::object(), options);
    EXPECT_TRUE(stream) << stream.status().to_string();
    auto call = agent_.receive();
    EXPECT_TRUE(call && call->header.kind == Kind::call);
    return stream ? std::move(*stream) : nullptr;
  }

  // A message the client sends after everything before it: what the agent
  // receives until the marker is all the client sent so far (one connection keeps order).
  std::vector<Got> sent_until_marker() {
    Header marker;
    marker.id = 999'999;
    marker.kind = Kind::cancel;
    EXPECT_TRUE(client_->send_message(marker, json::object()));
    std::vector<Got> before;
    while (auto got = agent_.receive()) {
      if (got->header.id == marker.id) return before;
      before.push_back(*got);
    }
    ADD_FAILURE() << "the marker never arrived";
    return before;
  }

  // Waits until the stream has a DATA item or has ended.
  Result<std::optional<Incoming>> next(Stream& stream) { return stream.next_within(kAnswer); }

  FakeAgent agent_;
  std::unique_ptr<Client> client_;
};

TEST_F(StreamTest, TryNextReturnsNothingWhileNoFrameIsReady) {
  auto stream = open();
  ASSERT_TRUE(stream);
  auto got = stream->try_next();
  ASSERT_TRUE(got) << got.status().to_string();
  EXPECT_FALSE(got->has_value());
  EXPECT_FALSE(stream->ended());
  EXPECT_TRUE(sent_until_marker().empty()) << "try_next sent something without taking an item";
}

TEST_F(StreamTest, PollsBesideAnotherDescriptor) {
  auto stream = open();
  ASSERT_TRUE(stream);
  int other = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  ASSERT_GE(other, 0);
  std::uint64_t one = 1;
  ASSERT_EQ(::write(other, &one, sizeof one), static_cast<ssize_t>(sizeof one));

  // Only the other descriptor is ready.
  zmq::pollitem_t items[] = {stream->poll_item(), {nullptr, other, ZMQ_POLLIN, 0}};
  ASSERT_EQ(zmq::poll(items, 2, kAnswer), 1);
  EXPECT_FALSE(items[0].revents & ZMQ_POLLIN);
  EXPECT_TRUE(items[1].revents & ZMQ_POLLIN);
  std::uint64_t value;
  ASSERT_EQ(::read(other, &value, sizeof value), static_cast<ssize_t>(sizeof value));

  // Now the stream's.
  agent_.send(stream->id(), Kind::data, {{"n", 1}});
  items[0].revents = items[1].revents = 0;
  ASSERT_EQ(zmq::poll(items, 2, kAnswer), 1);
  EXPECT_TRUE(items[0].revents & ZMQ_POLLIN);
  EXPECT_FALSE(items[1].revents & ZMQ_POLLIN);
  auto got = stream->try_next();
  ASSERT_TRUE(got && got->has_value());
  EXPECT_EQ((*got)->body["n"], 1);
  got = stream->try_next();
  ASSERT_TRUE(got);
  EXPECT_FALSE(got->has_value());
  ::close(other);
}

TEST_F(StreamTest, AnItemForAnotherStreamTakenMeanwhileIsStillFound) {
  auto first = open();
  auto second = open();
  ASSERT_TRUE(first && second);
  agent_.send(second->id(), Kind::data, {{"for", "second"}});
  zmq::pollitem_t item = first->poll_item();
  ASSERT_EQ(zmq::poll(&item, 1, kAnswer), 1);
  auto none = first->try_next();  // takes the second's item off the socket
  ASSERT_TRUE(none);
  EXPECT_FALSE(none->has_value());
  auto got = second->try_next();
  ASSERT_TRUE(got && got->has_value());
  EXPECT_EQ((*got)->body["for"], "second");
}

TEST_F(StreamTest, CreditIsGrantedOnceHalfTheWindowIsConsumed) {
  CallOptions options;
  options.window = 4;  // granted back two at a time
  auto stream = open(options);
  ASSERT_TRUE(stream);
  for (int i = 0; i < 4; ++i) agent_.send(stream->id(), Kind::data, {{"i", i}});

  auto got = next(*stream);
  ASSERT_TRUE(got && got->has_value());
  EXPECT_EQ((*got)->body["i"], 0);
  EXPECT_TRUE(sent_until_marker().empty()) << "an item counts only once the caller is done with it";
  got = next(*stream);  // the caller is done with item 0
  ASSERT_TRUE(got && got->has_value());
  EXPECT_TRUE(sent_until_marker().empty()) << "one consumed item is not half of a window of 4";
  got = next(*stream);  // done with item 1: two consumed
  ASSERT_TRUE(got && got->has_value());
  EXPECT_EQ((*got)->body["i"], 2);
  auto sent = sent_until_marker();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].header.kind, Kind::credit);
  EXPECT_EQ(sent[0].header.id, stream->id());
  EXPECT_EQ(sent[0].header.credit, 2u);
}

TEST_F(StreamTest, CreditBatchOfOneGrantsEachItem) {
  CallOptions options;
  options.window = 4;
  options.credit_batch = 1;
  auto stream = open(options);
  ASSERT_TRUE(stream);
  for (int i = 0; i < 3; ++i) agent_.send(stream->id(), Kind::data, {{"i", i}});
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(next(*stream));
  auto none = stream->try_next();  // done with the third
  ASSERT_TRUE(none);
  EXPECT_FALSE(none->has_value());
  auto sent = sent_until_marker();
  ASSERT_EQ(sent.size(), 3u);
  for (const auto& credit : sent) {
    EXPECT_EQ(credit.header.kind, Kind::credit);
    EXPECT_EQ(credit.header.credit, 1u);
  }
}

TEST_F(StreamTest, NoCreditIsGrantedAfterCancel) {
  CallOptions options;
  options.credit_batch = 1;
  auto stream = open(options);
  ASSERT_TRUE(stream);
  agent_.send(stream->id(), Kind::data, {{"i", 0}});
  agent_.send(stream->id(), Kind::data, {{"i", 1}});
  ASSERT_TRUE(next(*stream));
  ASSERT_TRUE(stream->cancel());
  auto got = next(*stream);
  ASSERT_TRUE(got && got->has_value());
  EXPECT_EQ((*got)->body["i"], 1);
  ASSERT_TRUE(stream->try_next());
  auto sent = sent_until_marker();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].header.kind, Kind::cancel);
}

TEST_F(StreamTest, AgentCreditAllowsSendWithoutWaiting) {
  auto stream = open();
  ASSERT_TRUE(stream);
  EXPECT_EQ(stream->send_credit(), 0u);
  agent_.send(stream->id(), Kind::credit, json::object(), 2);
  zmq::pollitem_t item = stream->poll_item();
  ASSERT_EQ(zmq::poll(&item, 1, kAnswer), 1);
  auto none = stream->try_next();  // CREDIT is counted, not handed out
  ASSERT_TRUE(none);
  EXPECT_FALSE(none->has_value());
  EXPECT_EQ(stream->send_credit(), 2u);
  ASSERT_TRUE(stream->send({{"stdin", "x"}}));
  EXPECT_EQ(stream->send_credit(), 1u);
  auto sent = sent_until_marker();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].header.kind, Kind::data);
  EXPECT_EQ(sent[0].body["stdin"], "x");
}

TEST_F(StreamTest, EndsWithTheResultAndItsAttachments) {
  auto stream = open();
  ASSERT_TRUE(stream);
  agent_.send(stream->id(), Kind::data, {{"i", 0}});
  agent_.send(stream->id(), Kind::result, {{"answer", 42}}, 0, {"tensor bytes"});
  auto got = next(*stream);
  ASSERT_TRUE(got && got->has_value());
  EXPECT_FALSE(stream->ended());
  got = next(*stream);
  ASSERT_TRUE(got) << got.status().to_string();
  EXPECT_FALSE(got->has_value());
  ASSERT_TRUE(stream->ended());
  ASSERT_TRUE(stream->result()) << stream->result().status().to_string();
  EXPECT_EQ(stream->result().value()["answer"], 42);
  auto attachments = stream->take_result_attachments();
  ASSERT_EQ(attachments.size(), 1u);
  EXPECT_EQ(attachments[0].to_string(), "tensor bytes");
  EXPECT_TRUE(stream->error_body().is_null());
  // Ended: nothing more, and no CANCEL when the stream goes.
  auto after = stream->try_next();
  ASSERT_TRUE(after);
  EXPECT_FALSE(after->has_value());
  stream.reset();
  EXPECT_TRUE(sent_until_marker().empty());
}

TEST_F(StreamTest, EndsWithTheErrorItsCodeAndDetails) {
  auto stream = open();
  ASSERT_TRUE(stream);
  agent_.send(stream->id(), Kind::error,
              {{"code", "raised"}, {"message", "boom"}, {"details", {{"type", "ValueError"}}}});
  auto got = next(*stream);
  ASSERT_TRUE(got) << got.status().to_string();
  EXPECT_FALSE(got->has_value());
  ASSERT_TRUE(stream->ended());
  EXPECT_EQ(stream->result().status().code(), ErrorCode::raised);
  EXPECT_EQ(stream->result().status().message(), "boom");
  EXPECT_EQ(stream->error_body()["details"]["type"], "ValueError");
}

TEST_F(StreamTest, AMalformedFrameFailsAndEndsTheStream) {
  auto stream = open();
  ASSERT_TRUE(stream);
  agent_.send_frames({"not msgpack", encode_body(json::object())});
  zmq::pollitem_t item = stream->poll_item();
  ASSERT_EQ(zmq::poll(&item, 1, kAnswer), 1);
  auto got = stream->try_next();
  ASSERT_FALSE(got);
  EXPECT_EQ(got.status().code(), ErrorCode::internal);
  EXPECT_TRUE(stream->ended());
  EXPECT_FALSE(stream->result());
}

TEST_F(StreamTest, NextWithinGivesUpWithoutEnding) {
  auto stream = open();
  ASSERT_TRUE(stream);
  auto got = stream->next_within(milliseconds(20));
  ASSERT_TRUE(got);
  EXPECT_FALSE(got->has_value());
  EXPECT_FALSE(stream->ended());
}

TEST_F(StreamTest, AStreamDroppedBeforeItsEndIsCancelled) {
  auto stream = open();
  ASSERT_TRUE(stream);
  std::uint64_t id = stream->id();
  stream.reset();
  auto sent = sent_until_marker();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].header.kind, Kind::cancel);
  EXPECT_EQ(sent[0].header.id, id);
}

}  // namespace
}  // namespace gpubox::rpc
