// Requests of one client never wait for another's; many clients at once are
// all answered correctly.
#include <atomic>
#include <thread>

#include "tests/rpc/rpc_test_support.h"

namespace gpubox::testing {
namespace {

class ConcurrencyTest : public RpcTest {};

TEST_F(ConcurrencyTest, PingAnswersFastWhileAnotherClientRunsALongExec) {
  ASSERT_NO_FATAL_FAILURE(start());
  auto busy = tcp_client();
  auto other = tcp_client();
  ASSERT_TRUE(busy && other);
  std::vector<std::string> sleeper = {"sleep", "5"};
  auto exec = busy->stream("proc.exec", json{{"argv", sleeper}}, waiting());
  ASSERT_TRUE(exec) << exec.status().to_string();
  // The exec is under way once its process shows up.
  ASSERT_TRUE(wait_until([&] { return !listed(*other, sleeper).empty(); }, milliseconds(5000)));
  for (int i = 0; i < 20; ++i) {
    auto begin = Clock::now();
    auto pong = other->call("sys.ping", json{{"i", i}}, waiting());
    auto took = Clock::now() - begin;
    ASSERT_TRUE(pong) << pong.status().to_string();
    EXPECT_EQ((*pong)["echo"]["i"], i);
    EXPECT_LT(took, milliseconds(100)) << "ping " << i << " waited for another client's exec";
  }
  EXPECT_FALSE((*exec)->ended()) << "the exec of sleep 5 ended early";
  ASSERT_TRUE((*exec)->cancel());
  while (!(*exec)->ended()) ASSERT_TRUE((*exec)->next());
  EXPECT_EQ((*exec)->result().status().code(), ErrorCode::cancelled);
}

TEST_F(ConcurrencyTest, EightClientsFiveHundredPingsEachAllAnsweredCorrectly) {
  ASSERT_NO_FATAL_FAILURE(start());
  constexpr int kClients = 8;
  constexpr int kPings = 500;
  std::atomic<int> correct{0};
  std::vector<std::string> errors(kClients);
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      auto client = connect_tcp();
      if (!client) {
        errors[c] = client.status().to_string();
        return;
      }
      for (int i = 0; i < kPings; ++i) {
        json params = {{"client", c}, {"i", i}, {"payload", std::string(static_cast<std::size_t>(i % 64), 'x')}};
        auto pong = (*client)->call("sys.ping", params, waiting());
        if (!pong) {
          errors[c] = pong.status().to_string();
          return;
        }
        if ((*pong)["echo"] != params || (*pong)["pong"] != true) {
          errors[c] = "wrong answer: " + pong->dump();
          return;
        }
        ++correct;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int c = 0; c < kClients; ++c) EXPECT_EQ(errors[c], "") << "client " << c;
  EXPECT_EQ(correct.load(), kClients * kPings);
}

TEST_F(ConcurrencyTest, ManyRequestsInFlightOnOneConnectionEachGetTheirOwnAnswer) {
  ASSERT_NO_FATAL_FAILURE(start());
  auto client = ipc_client();
  ASSERT_TRUE(client);
  // Interleaved: slow execs and fast pings on one connection, answers matched by id.
  std::vector<std::unique_ptr<rpc::Stream>> execs;
  for (int i = 0; i < 4; ++i) {
    auto exec = client->stream("proc.exec", json{{"shell", "sleep 0.2; echo " + std::to_string(i)}}, waiting());
    ASSERT_TRUE(exec);
    execs.push_back(std::move(*exec));
  }
  for (int i = 0; i < 50; ++i) {
    auto pong = client->call("sys.ping", json{{"i", i}}, waiting());
    ASSERT_TRUE(pong);
    EXPECT_EQ((*pong)["echo"]["i"], i);
  }
  for (int i = 0; i < 4; ++i) {
    while (!execs[i]->ended()) ASSERT_TRUE(execs[i]->next());
    ASSERT_TRUE(execs[i]->result()) << execs[i]->result().status().to_string();
    EXPECT_EQ(bytes_of(execs[i]->result().value()["stdout"]), std::to_string(i) + "\n");
  }
}

}  // namespace
}  // namespace gpubox::testing
