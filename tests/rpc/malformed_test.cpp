// Malformed messages from a raw DEALER get the documented ERROR
// (invalid_request for their id when one can be read) or are dropped; they
// never affect the connection's other requests or another client.
#include "tests/rpc/rpc_test_support.h"

namespace gpubox::testing {
namespace {

std::string msgpack(const json& value) {
  std::string out;
  json::to_msgpack(value, out);
  return out;
}

class MalformedTest : public RpcTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(start());
    peer_ = std::make_unique<RawPeer>(agent_->ipc_endpoint());
    bystander_ = ipc_client();
    ASSERT_TRUE(bystander_);
    // The bystander has a request in flight throughout.
    auto stream = bystander_->stream("proc.spawn", json{{"argv", {"cat"}}}, waiting());
    ASSERT_TRUE(stream);
    bystander_call_ = std::move(*stream);
    auto pid = bystander_call_->next();
    ASSERT_TRUE(pid && pid->has_value());
  }

  void TearDown() override {
    // The bystander is unaffected: its ping and its in-flight request still work.
    if (bystander_ && bystander_call_) {
      auto pong = bystander_->call("sys.ping", json{{"ok", true}}, waiting());
      EXPECT_TRUE(pong) << pong.status().to_string();
      EXPECT_TRUE(bystander_call_->send(json{{"stdin", rpc::binary("still here")}, {"eof", true}}));
      std::string out;
      while (!bystander_call_->ended()) {
        auto next = bystander_call_->next();
        ASSERT_TRUE(next) << next.status().to_string();
        if (next->has_value() && !(*next)->attachments.empty()) out += (*next)->attachments[0].to_string();
      }
      EXPECT_TRUE(bystander_call_->result()) << bystander_call_->result().status().to_string();
      EXPECT_EQ(out, "still here");
    }
    RpcTest::TearDown();
  }

  // Sends frames, then a ping: the one ERROR for `id` must come before the
  // pong (the agent handles a connection's messages in order), nothing else.
  void expect_error(const std::vector<std::string>& frames, std::uint64_t id, const std::string& code,
                    const std::string& mentions = "") {
    peer_->send(frames);
    auto before = peer_->until_pong(1000 + id);
    ASSERT_EQ(before.size(), 1u) << "expected exactly one ERROR";
    EXPECT_EQ(before[0].header.id, id);
    EXPECT_EQ(before[0].header.kind, rpc::Kind::error);
    EXPECT_EQ(before[0].code(), code) << before[0].body.dump();
    EXPECT_NE(before[0].body.value("message", "").find(mentions), std::string::npos) << before[0].body.dump();
  }

  void expect_dropped(const std::vector<std::string>& frames, std::uint64_t sync) {
    peer_->send(frames);
    auto before = peer_->until_pong(sync);
    EXPECT_TRUE(before.empty()) << "got " << before.size() << " answers, first: " << before[0].body.dump();
  }

  std::unique_ptr<RawPeer> peer_;
  std::unique_ptr<rpc::Client> bystander_;
  std::unique_ptr<rpc::Stream> bystander_call_;
};

const std::string kEmpty = "\x80";

TEST_F(MalformedTest, HeaderThatIsNotMsgpackIsDropped) {
  expect_dropped({"\xff\xfe\xfd", kEmpty}, 2001);
  expect_dropped({"", kEmpty}, 2002);
  expect_dropped({msgpack(json{{"id", 3}}), kEmpty}, 2003);
  expect_dropped({msgpack(json::array({1, 0, 0, "sys.ping", 0, 0})), kEmpty}, 2004);  // id 0
  expect_dropped({std::string(600, '\x90'), kEmpty}, 2005);
}

TEST_F(MalformedTest, WrongVersionGetsInvalidRequest) {
  expect_error({msgpack(json::array({2, 11, 0, "sys.ping", 0, 0})), kEmpty}, 11, "invalid_request", "version");
}

TEST_F(MalformedTest, UnknownKindGetsInvalidRequest) {
  expect_error({msgpack(json::array({1, 12, 6, "", 0, 0})), kEmpty}, 12, "invalid_request", "kind");
  expect_error({msgpack(json::array({1, 13, 200, "", 0, 0})), kEmpty}, 13, "invalid_request", "kind");
}

TEST_F(MalformedTest, MissingBodyGetsInvalidRequest) {
  expect_error({rpc::encode_header(RawPeer::header(14, rpc::Kind::call, "sys.ping"))}, 14, "invalid_request", "body");
}

TEST_F(MalformedTest, BodyThatIsNotAMapGetsInvalidRequest) {
  std::string header = rpc::encode_header(RawPeer::header(15, rpc::Kind::call, "sys.ping"));
  expect_error({header, msgpack(json::array({1}))}, 15, "invalid_request", "map");
  expect_error({header, ""}, 15, "invalid_request", "body");
  expect_error({header, "\x81\xa1"}, 15, "invalid_request", "msgpack");
}

TEST_F(MalformedTest, ResultOrErrorFromAClientGetsInvalidRequest) {
  expect_error({rpc::encode_header(RawPeer::header(16, rpc::Kind::result)), kEmpty}, 16, "invalid_request", "agent");
  expect_error({rpc::encode_header(RawPeer::header(17, rpc::Kind::error)),
                rpc::encode_body(json{{"code", "internal"}, {"message", "x"}})},
               17, "invalid_request", "agent");
}

TEST_F(MalformedTest, UnknownMethodGetsUnknownMethod) {
  expect_error({rpc::encode_header(RawPeer::header(18, rpc::Kind::call, "no.such")), kEmpty}, 18, "unknown_method",
               "no.such");
}

TEST_F(MalformedTest, DuplicateIdInFlightEndsTheRequestOnceWithInvalidRequest) {
  std::vector<std::string> sleeper = {"sleep", "41.8"};
  peer_->call(21, "proc.exec", json{{"argv", sleeper}});
  ASSERT_TRUE(wait_until([&] { return !listed(*bystander_, sleeper).empty(); }, milliseconds(5000)));
  peer_->call(21, "sys.ping");
  auto before = peer_->until_pong(3001);
  ASSERT_EQ(before.size(), 1u);
  EXPECT_EQ(before[0].header.id, 21u);
  EXPECT_EQ(before[0].header.kind, rpc::Kind::error);
  EXPECT_EQ(before[0].code(), "invalid_request");
  EXPECT_NE(before[0].body.value("message", "").find("in flight"), std::string::npos) << before[0].body.dump();
  // That was request 21's one answer: its process is killed and nothing more comes for it.
  EXPECT_TRUE(gone(*bystander_, sleeper));
  for (const auto& late : peer_->until_pong(3002)) ADD_FAILURE() << "second answer for " << late.header.id << ": " << late.body.dump();
  // The id is free again.
  peer_->call(21, "sys.ping");
  auto pong = peer_->receive();
  ASSERT_TRUE(pong);
  EXPECT_EQ(pong->header.id, 21u);
  EXPECT_EQ(pong->header.kind, rpc::Kind::result);
}

TEST_F(MalformedTest, MalformedMessageAboutARequestInFlightEndsItOnce) {
  // A CANCEL without a body about request 22 ends 22 with invalid_request,
  // not with an extra ERROR beside its later RESULT.
  std::vector<std::string> sleeper = {"sleep", "41.9"};
  peer_->call(22, "proc.exec", json{{"argv", sleeper}});
  ASSERT_TRUE(wait_until([&] { return !listed(*bystander_, sleeper).empty(); }, milliseconds(5000)));
  expect_error({rpc::encode_header(RawPeer::header(22, rpc::Kind::cancel))}, 22, "invalid_request", "body");
  EXPECT_TRUE(gone(*bystander_, sleeper));
  EXPECT_TRUE(peer_->until_pong(3003).empty());
}

TEST_F(MalformedTest, AStormOfGarbageLeavesTheConnectionUsable) {
  for (int i = 0; i < 200; ++i) {
    std::string junk(static_cast<std::size_t>(i % 17), static_cast<char>(i * 37));
    peer_->send({junk, junk, junk});
    peer_->send({junk});
  }
  auto before = peer_->until_pong(4001);
  for (const auto& message : before) EXPECT_EQ(message.header.kind, rpc::Kind::error);
  peer_->call(4002, "sys.ping", json{{"after", "storm"}});
  auto pong = peer_->receive();
  ASSERT_TRUE(pong);
  EXPECT_EQ(pong->body["echo"]["after"], "storm");
}

}  // namespace
}  // namespace gpubox::testing
