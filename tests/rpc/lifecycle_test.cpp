// Deadlines, cancellation and credit flow control: a stopped request's
// process is killed, and a slow reader bounds what the agent buffers.
#include <thread>

#include "tests/rpc/rpc_test_support.h"

namespace gpubox::testing {
namespace {

class LifecycleTest : public RpcTest {};

TEST_F(LifecycleTest, DeadlineExceededStopsTheRequestAndKillsItsProcess) {
  ASSERT_NO_FATAL_FAILURE(start());
  auto client = ipc_client();
  ASSERT_TRUE(client);
  std::vector<std::string> sleeper = {"sleep", "41.5"};
  rpc::CallOptions options;
  options.timeout_ms = 300;
  auto begin = Clock::now();
  auto result = client->call("proc.exec", json{{"argv", sleeper}}, options);
  auto took = Clock::now() - begin;
  EXPECT_EQ(code_of(result), ErrorCode::deadline_exceeded) << result.status().to_string();
  EXPECT_GE(took, milliseconds(300));
  EXPECT_LT(took, milliseconds(3000));
  EXPECT_TRUE(gone(*client, sleeper)) << "the process outlived its request's deadline";
  // The connection is fine afterwards.
  EXPECT_TRUE(client->call("sys.ping", json::object(), waiting()));
}

TEST_F(LifecycleTest, DeadlineOfAStreamStopsItToo) {
  ASSERT_NO_FATAL_FAILURE(start());
  auto client = ipc_client();
  ASSERT_TRUE(client);
  std::vector<std::string> sleeper = {"sleep", "41.6"};
  rpc::CallOptions options;
  options.timeout_ms = 300;
  auto stream = client->stream("proc.spawn", json{{"argv", sleeper}}, options);
  ASSERT_TRUE(stream);
  while (!(*stream)->ended()) ASSERT_TRUE((*stream)->next());
  EXPECT_EQ((*stream)->result().status().code(), ErrorCode::deadline_exceeded);
  EXPECT_TRUE(gone(*client, sleeper));
}

TEST_F(LifecycleTest, HugeTimeoutIsNoDeadline) {
  ASSERT_NO_FATAL_FAILURE(start());
  auto client = ipc_client();
  ASSERT_TRUE(client);
  rpc::CallOptions options = waiting();
  options.timeout_ms = std::numeric_limits<std::uint64_t>::max();
  auto result = client->call("proc.exec", json{{"argv", {"echo", "ok"}}}, options);
  ASSERT_TRUE(result) << result.status().to_string();
  EXPECT_EQ(bytes_of((*result)["stdout"]), "ok\n");
}

TEST_F(LifecycleTest, CancelAnswersCancelledAndKillsTheProcess) {
  ASSERT_NO_FATAL_FAILURE(start());
  auto client = ipc_client();
  auto observer = ipc_client();
  ASSERT_TRUE(client && observer);
  std::vector<std::string> sleeper = {"sleep", "41.7"};
  auto exec = client->stream("proc.exec", json{{"argv", sleeper}}, waiting());
  ASSERT_TRUE(exec);
  ASSERT_TRUE(wait_until([&] { return !listed(*observer, sleeper).empty(); }, milliseconds(5000)));
  ASSERT_TRUE((*exec)->cancel());
  while (!(*exec)->ended()) ASSERT_TRUE((*exec)->next());
  EXPECT_EQ((*exec)->result().status().code(), ErrorCode::cancelled) << (*exec)->result().status().to_string();
  EXPECT_TRUE(gone(*observer, sleeper)) << "the process outlived its cancelled request";
}

TEST_F(LifecycleTest, ClientThatDisconnectsHasItsRequestsStoppedAndTheirProcessesKilled) {
  ASSERT_NO_FATAL_FAILURE(start());
  auto observer = ipc_client();
  ASSERT_TRUE(observer);
  std::vector<std::string> sleeper = {"sleep", "41.8"};
  {
    RawPeer departing(agent_->ipc_endpoint());
    departing.send(RawPeer::header(1, rpc::Kind::call, "proc.exec"), json{{"argv", sleeper}});
    ASSERT_TRUE(wait_until([&] { return !listed(*observer, sleeper).empty(); }, milliseconds(5000)));
  }  // the socket closes without a CANCEL
  EXPECT_TRUE(gone(*observer, sleeper)) << "the process outlived its client's connection";
  auto pong = observer->call("sys.ping", json{{"still", "here"}}, waiting());
  ASSERT_TRUE(pong) << pong.status().to_string();
  EXPECT_EQ((*pong)["echo"]["still"], "here");
}

TEST_F(LifecycleTest, CancelOfAnUnknownOrFinishedRequestIsIgnored) {
  ASSERT_NO_FATAL_FAILURE(start());
  RawPeer peer(agent_->ipc_endpoint());
  peer.call(5, "sys.ping");
  auto pong = peer.receive();
  ASSERT_TRUE(pong);
  EXPECT_EQ(pong->header.kind, rpc::Kind::result);
  peer.send(RawPeer::header(5, rpc::Kind::cancel));
  peer.send(RawPeer::header(77, rpc::Kind::cancel));
  peer.send(RawPeer::header(77, rpc::Kind::credit, "", 4));
  peer.send(RawPeer::header(77, rpc::Kind::data), json{{"stdin", "x"}});
  EXPECT_TRUE(peer.until_pong(6).empty());
}

TEST_F(LifecycleTest, SlowReaderWithWindowOneBoundsTheAgentsMemory) {
  ASSERT_NO_FATAL_FAILURE(start());
  auto client = ipc_client();
  ASSERT_TRUE(client);
  ASSERT_TRUE(client->call("sys.ping", json::object(), waiting()));
  auto baseline = agent_->rss_bytes();
  ASSERT_TRUE(baseline);

  constexpr long long kTotal = 50'000'000;
  rpc::CallOptions options = waiting();
  options.window = 1;
  auto stream = client->stream("proc.spawn", json{{"shell", "yes | head -c " + std::to_string(kTotal)}}, options);
  ASSERT_TRUE(stream);
  long long received = 0, peak = *baseline;
  int messages = 0;
  while (true) {
    auto next = (*stream)->next();
    ASSERT_TRUE(next) << next.status().to_string();
    if (!next->has_value()) break;
    for (auto& attachment : (*next)->attachments) received += static_cast<long long>(attachment.size());
    ++messages;
    // Slow for the first 200 messages: were the agent not waiting for credit,
    // it would read all 50 MB from the pipe meanwhile.
    if (messages <= 200) std::this_thread::sleep_for(milliseconds(3));
    if (messages % 10 == 0) {
      if (auto rss = agent_->rss_bytes()) peak = std::max(peak, *rss);
    }
  }
  ASSERT_TRUE((*stream)->result()) << (*stream)->result().status().to_string();
  EXPECT_EQ((*stream)->result().value()["exit_code"], 0);
  EXPECT_EQ(received, kTotal);
#ifndef GPUBOX_SANITIZE  // ASan's quarantine holds freed chunks: RSS says nothing there
  EXPECT_LT(peak - *baseline, 8ll << 20) << "the agent's RSS grew by " << (peak - *baseline) / 1024 << " KiB";
#endif
  RecordProperty("agent_rss_growth_kib", std::to_string((peak - *baseline) / 1024));
}

TEST_F(LifecycleTest, WithoutCreditTheAgentSendsNoMoreDataAndBuffersNothing) {
  ASSERT_NO_FATAL_FAILURE(start());
  RawPeer peer(agent_->ipc_endpoint());
  auto baseline = agent_->rss_bytes();
  ASSERT_TRUE(baseline);
  // Window 1, used up by {"pid"}; `yes` could fill 50 MB in a fraction of a second.
  peer.send(RawPeer::header(31, rpc::Kind::call, "proc.spawn", 1), json{{"shell", "yes | head -c 50000000"}});
  int data = 0;
  while (auto message = peer.receive(milliseconds(500))) {
    ASSERT_EQ(message->header.id, 31u);
    ASSERT_NE(message->header.kind, rpc::Kind::result);
    ASSERT_NE(message->header.kind, rpc::Kind::error);
    if (message->header.kind == rpc::Kind::data) ++data;
  }
  EXPECT_EQ(data, 1) << "DATA beyond the window of 1";
  auto rss = agent_->rss_bytes();
  ASSERT_TRUE(rss);
  EXPECT_LT(*rss - *baseline, 8ll << 20) << "the agent buffered " << (*rss - *baseline) / 1024 << " KiB";
  // Three more credits: exactly three more DATA, each with output.
  peer.send(RawPeer::header(31, rpc::Kind::credit, "", 3));
  data = 0;
  while (auto message = peer.receive(milliseconds(500))) {
    ASSERT_EQ(message->header.kind, rpc::Kind::data);
    EXPECT_EQ(message->body.value("stream", ""), "stdout");
    ASSERT_EQ(message->attachments.size(), 1u);
    EXPECT_FALSE(message->attachments[0].empty());
    ++data;
  }
  EXPECT_EQ(data, 3);
  peer.send(RawPeer::header(31, rpc::Kind::cancel));
  auto final = peer.receive();
  ASSERT_TRUE(final);
  EXPECT_EQ(final->header.kind, rpc::Kind::error);
  EXPECT_EQ(final->code(), "cancelled");
}

TEST_F(LifecycleTest, DataBeyondGrantedCreditIsResourceExhausted) {
  ASSERT_NO_FATAL_FAILURE(start());
  RawPeer peer(agent_->ipc_endpoint());
  // A window of 1: {"pid"} uses it up, so the method soon waits for credit
  // to send `yes`'s output and takes no more stdin meanwhile.
  peer.send(RawPeer::header(9, rpc::Kind::call, "proc.spawn", 1), json{{"argv", {"yes"}}});
  std::uint64_t granted = 0;
  while (granted == 0) {
    auto message = peer.receive();
    ASSERT_TRUE(message);
    if (message->header.kind == rpc::Kind::credit) granted = message->header.credit;
  }
  for (std::uint64_t i = 0; i < granted + 200; ++i) peer.send(RawPeer::header(9, rpc::Kind::data), json{{"stdin", "x"}});
  std::optional<RawPeer::Message> final;
  while (auto message = peer.receive()) {
    if (message->header.kind == rpc::Kind::error || message->header.kind == rpc::Kind::result) {
      final = message;
      break;
    }
  }
  ASSERT_TRUE(final);
  EXPECT_EQ(final->header.kind, rpc::Kind::error);
  EXPECT_EQ(final->code(), "resource_exhausted") << final->body.dump();
}

}  // namespace
}  // namespace gpubox::testing
