// agent/methods/relay_frames.h: what the agent accepts from the host on a
// kernel.relay stream before anything reaches the kernel's sockets.
#include "agent/methods/relay_frames.h"

#include <gtest/gtest.h>

namespace gpubox {
namespace {

using nlohmann::json;

rpc::Incoming incoming(json body, std::initializer_list<std::string> frames = {}) {
  rpc::Incoming in{std::move(body), {}};
  for (const auto& frame : frames) in.attachments.emplace_back(frame.data(), frame.size());
  return in;
}

const std::string kHeader = R"({"msg_id": "1", "msg_type": "execute_request"})";

TEST(RelayFrames, AMessageForAPeer) {
  auto in = incoming({{"ch", "stdin"}, {"peer", 7}}, {"sig", kHeader, "{}", "{}", "{}", "buffer"});
  auto input = decode_relay_input(in);
  ASSERT_TRUE(input) << input.status().to_string();
  EXPECT_EQ(input->kind, RelayInput::Kind::message);
  EXPECT_EQ(input->channel, RelayChannel::stdin_channel);
  EXPECT_EQ(input->peer, 7u);
  EXPECT_EQ(input->msg_type, "execute_request");
  ASSERT_EQ(input->frames.size(), 6u);
  EXPECT_EQ(input->frames[5].to_string(), "buffer");
}

TEST(RelayFrames, CloseAndRestart) {
  auto close = incoming({{"close", 3}});
  auto closed = decode_relay_input(close);
  ASSERT_TRUE(closed);
  EXPECT_EQ(closed->kind, RelayInput::Kind::close);
  EXPECT_EQ(closed->peer, 3u);
  auto restart = incoming({{"restart", true}});
  auto restarted = decode_relay_input(restart);
  ASSERT_TRUE(restarted);
  EXPECT_EQ(restarted->kind, RelayInput::Kind::restart);
}

TEST(RelayFrames, RefusalsSayWhatIsWrong) {
  struct Case {
    json body;
    std::vector<std::string> frames;
    std::string expected;
  };
  std::vector<Case> cases = {
      {{{"ch", "iopub"}, {"peer", 1}}, {"s", kHeader, "{}", "{}", "{}"}, "ch: expected"},
      {{{"ch", "shell"}}, {"s", kHeader, "{}", "{}", "{}"}, "needs its peer"},
      {{{"ch", "shell"}, {"peer", -1}}, {"s", kHeader, "{}", "{}", "{}"}, "params.peer"},
      {{{"ch", "shell"}, {"peer", 1}}, {"s", kHeader, "{}"}, "at least 5 attachments"},
      {{{"ch", "shell"}, {"peer", 1}}, {"s", "{not json", "{}", "{}", "{}"}, "is not a JSON object"},
      {{{"ch", "shell"}, {"peer", 1}}, {"s", R"({"msg_id": "1"})", "{}", "{}", "{}"}, "no msg_type"},
      {{{"ch", "shell"}, {"peer", 1}, {"close", 1}}, {}, "exactly one of"},
      {json::object(), {}, "exactly one of"},
      {{{"restart", false}}, {}, "restart must be true"},
      {{{"close", 1}}, {"x"}, "close takes no peer"},
      {{{"ch", "shell"}, {"peer", 1}, {"colour", "red"}}, {"s", kHeader, "{}", "{}", "{}"}, "colour"},
  };
  for (auto& c : cases) {
    rpc::Incoming in{c.body, {}};
    for (const auto& frame : c.frames) in.attachments.emplace_back(frame.data(), frame.size());
    auto input = decode_relay_input(in);
    ASSERT_FALSE(input) << c.body.dump();
    EXPECT_EQ(input.status().code(), ErrorCode::invalid_request);
    EXPECT_NE(input.status().message().find(c.expected), std::string::npos) << input.status().message();
  }
}

}  // namespace
}  // namespace gpubox
