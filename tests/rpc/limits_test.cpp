// Every limit of rpc/PROTOCOL.md "Limits", against the real agent.
#include <thread>

#include "tests/rpc/rpc_test_support.h"

namespace gpubox::testing {
namespace {

class LimitsTest : public RpcTest {};

TEST_F(LimitsTest, InfoReportsTheConfiguredLimits) {
  RpcAgentOptions options;
  options.rpc = {{"max_body_bytes", 65536}, {"max_in_flight", 4}, {"max_message_bytes", 1 << 20}};
  ASSERT_NO_FATAL_FAILURE(start(options));
  auto client = ipc_client();
  ASSERT_TRUE(client);
  auto info = client->call("sys.info", json::object(), waiting());
  ASSERT_TRUE(info) << info.status().to_string();
  EXPECT_EQ((*info)["limits"]["max_body_bytes"], 65536);
  EXPECT_EQ((*info)["limits"]["max_in_flight"], 4);
  EXPECT_EQ((*info)["limits"]["max_message_bytes"], 1 << 20);
  EXPECT_EQ((*info)["limits"]["max_attachments"], 64);
}

TEST_F(LimitsTest, BodyOverMaxBodyBytesIsResourceExhausted) {
  RpcAgentOptions options;
  options.rpc = {{"max_body_bytes", 65536}};
  ASSERT_NO_FATAL_FAILURE(start(options));
  auto client = tcp_client();
  ASSERT_TRUE(client);
  auto over = client->call("sys.ping", json{{"blob", rpc::binary(std::string(70'000, 'x'))}}, waiting());
  EXPECT_EQ(code_of(over), ErrorCode::resource_exhausted) << over.status().to_string();
  EXPECT_NE(over.status().message().find("65536"), std::string::npos) << over.status().message();
  auto under = client->call("sys.ping", json{{"blob", rpc::binary(std::string(60'000, 'x'))}}, waiting());
  ASSERT_TRUE(under) << under.status().to_string();
  EXPECT_EQ(bytes_of((*under)["echo"]["blob"]).size(), 60'000u);
}

TEST_F(LimitsTest, DefaultBodyLimitIsOneMebibyte) {
  ASSERT_NO_FATAL_FAILURE(start());
  auto client = ipc_client();
  ASSERT_TRUE(client);
  auto over = client->call("sys.ping", json{{"blob", rpc::binary(std::string(1 << 20, 'x'))}}, waiting());
  EXPECT_EQ(code_of(over), ErrorCode::resource_exhausted) << over.status().to_string();
  auto under = client->call("sys.ping", json{{"blob", rpc::binary(std::string((1 << 20) - 64, 'x'))}}, waiting());
  EXPECT_TRUE(under) << under.status().to_string();
}

TEST_F(LimitsTest, RequestsBeyondMaxInFlightOnOneConnectionAreResourceExhausted) {
  RpcAgentOptions options;
  options.rpc = {{"max_in_flight", 4}};
  ASSERT_NO_FATAL_FAILURE(start(options));
  auto client = ipc_client();
  auto other = ipc_client();
  ASSERT_TRUE(client && other);
  // Four unfinished requests: processes that wait for stdin.
  std::vector<std::unique_ptr<rpc::Stream>> open;
  for (int i = 0; i < 4; ++i) {
    auto spawned = client->stream("proc.spawn", json{{"argv", {"cat"}}}, waiting());
    ASSERT_TRUE(spawned) << spawned.status().to_string();
    auto first = (*spawned)->next();  // {"pid"}: the request is in flight
    ASSERT_TRUE(first && first->has_value()) << first.status().to_string();
    open.push_back(std::move(*spawned));
  }
  for (int i = 0; i < 3; ++i) {
    auto excess = client->call("sys.ping", json::object(), waiting());
    EXPECT_EQ(code_of(excess), ErrorCode::resource_exhausted) << excess.status().to_string();
  }
  auto excess_exec = client->call("proc.exec", json{{"argv", {"true"}}}, waiting());
  EXPECT_EQ(code_of(excess_exec), ErrorCode::resource_exhausted) << excess_exec.status().to_string();
  // Another connection has its own budget.
  EXPECT_TRUE(other->call("sys.ping", json::object(), waiting()));
  // The four are unaffected: each still takes stdin and finishes.
  for (auto& stream : open) {
    ASSERT_TRUE(stream->send(json{{"stdin", rpc::binary("bye\n")}, {"eof", true}}));
    std::string out;
    while (!stream->ended()) {
      auto next = stream->next();
      ASSERT_TRUE(next) << next.status().to_string();
      if (next->has_value() && !(*next)->attachments.empty()) out += (*next)->attachments[0].to_string();
    }
    ASSERT_TRUE(stream->result()) << stream->result().status().to_string();
    EXPECT_EQ(out, "bye\n");
  }
  EXPECT_TRUE(client->call("sys.ping", json::object(), waiting()));
}

TEST_F(LimitsTest, MoreThanMaxAttachmentsIsInvalidRequest) {
  ASSERT_NO_FATAL_FAILURE(start());
  auto client = ipc_client();
  ASSERT_TRUE(client);
  auto with = [&](int count) {
    std::vector<zmq::message_t> attachments;
    for (int i = 0; i < count; ++i) attachments.emplace_back(std::to_string(i));
    rpc::CallOptions options = waiting();
    options.attachments = &attachments;
    return client->call("sys.ping", json::object(), options);
  };
  auto over = with(65);
  EXPECT_EQ(code_of(over), ErrorCode::invalid_request) << over.status().to_string();
  EXPECT_NE(over.status().message().find("64"), std::string::npos) << over.status().message();
  auto at_limit = with(64);
  EXPECT_TRUE(at_limit) << at_limit.status().to_string();
}

TEST_F(LimitsTest, FrameOverMaxMessageBytesDropsThatConnectionOnly) {
  RpcAgentOptions options;
  options.rpc = {{"max_message_bytes", 65536}};
  ASSERT_NO_FATAL_FAILURE(start(options));
  auto offender = tcp_client();
  auto bystander = tcp_client();
  ASSERT_TRUE(offender && bystander);
  // The bystander has a request in flight while the offender is dropped.
  auto slow = bystander->stream("proc.exec", json{{"shell", "sleep 0.5; echo done"}}, waiting());
  ASSERT_TRUE(slow);

  std::vector<zmq::message_t> big;
  big.emplace_back(std::string(70'000, 'x'));
  rpc::CallOptions call = waiting(kSilence);
  call.attachments = &big;
  auto dropped = offender->call("sys.ping", json::object(), call);
  EXPECT_EQ(code_of(dropped), ErrorCode::unavailable) << "an over-long frame got an answer: " << dropped.status().to_string();

  auto pong = bystander->call("sys.ping", json{{"still", "here"}}, waiting());
  ASSERT_TRUE(pong) << pong.status().to_string();
  EXPECT_EQ((*pong)["echo"]["still"], "here");
  while (!(*slow)->ended()) ASSERT_TRUE((*slow)->next());
  ASSERT_TRUE((*slow)->result()) << (*slow)->result().status().to_string();
  EXPECT_EQ(bytes_of((*slow)->result().value()["stdout"]), "done\n");
  // A fresh connection of the offender's is served again.
  auto fresh = tcp_client();
  ASSERT_TRUE(fresh);
  EXPECT_TRUE(fresh->call("sys.ping", json::object(), waiting()));
}

}  // namespace
}  // namespace gpubox::testing
