// sys.ping, sys.info, sys.usage and sys.shutdown against the real agent.
#include <cmath>

#include "tests/rpc/rpc_test_support.h"

namespace gpubox::testing {
namespace {

class SysTest : public RpcTest {};

TEST_F(SysTest, PingEchoesEveryMsgpackTypeUnchanged) {
  ASSERT_NO_FATAL_FAILURE(start());
  auto client = tcp_client();
  ASSERT_TRUE(client);
  json params = {
      {"nil", nullptr},
      {"t", true},
      {"f", false},
      {"small", 5},
      {"negative", -123456789},
      {"min", std::numeric_limits<std::int64_t>::min()},
      {"max", std::numeric_limits<std::uint64_t>::max()},
      {"float", 0.25},
      {"text", "héllo ✓"},
      {"bytes", rpc::binary(std::string("\x00\x01\xff", 3))},
      {"list", {1, "two", json::array(), json::object()}},
      {"map", {{"inner", {{"deeper", {1, 2, 3}}}}}},
  };
  auto pong = client->call("sys.ping", params, waiting());
  ASSERT_TRUE(pong) << pong.status().to_string();
  EXPECT_EQ((*pong)["pong"], true);
  EXPECT_EQ((*pong)["echo"], params);
  EXPECT_TRUE((*pong)["echo"]["bytes"].is_binary());
  auto plain = client->call("sys.ping", json::object(), waiting());
  ASSERT_TRUE(plain);
  EXPECT_EQ(*plain, json({{"pong", true}}));
}

TEST_F(SysTest, InfoDescribesTheAgent) {
  ASSERT_NO_FATAL_FAILURE(start());
  auto client = ipc_client();
  ASSERT_TRUE(client);
  auto info = client->call("sys.info", json::object(), waiting());
  ASSERT_TRUE(info) << info.status().to_string();
  EXPECT_EQ((*info)["protocol_version"], 1);
  EXPECT_EQ((*info)["pid"], agent_->pid());
  EXPECT_TRUE((*info)["agent_version"].is_string());
  EXPECT_GE((*info)["uptime_s"].get<double>(), 0.0);
  EXPECT_EQ((*info)["components"]["rpc"]["state"], "ready");
  EXPECT_EQ((*info)["lifecycle"], json({{"timeout_s", 0.0}, {"idle_timeout_s", 0.0}}));  // this agent's config sets neither
  for (const char* method : {"sys.ping", "sys.info", "sys.shutdown", "proc.exec", "proc.spawn", "proc.signal", "proc.list"}) {
    EXPECT_NE(std::find((*info)["methods"].begin(), (*info)["methods"].end(), method), (*info)["methods"].end()) << method;
  }
  auto refused = client->call("sys.info", json{{"verbose", true}}, waiting());
  EXPECT_EQ(code_of(refused), ErrorCode::invalid_request);
}

TEST_F(SysTest, UsageIsOnTheAgentsClockAndRefusesParams) {
  ASSERT_NO_FATAL_FAILURE(start());
  auto client = ipc_client();
  ASSERT_TRUE(client);
  auto usage = client->call("sys.usage", json::object(), waiting());
  ASSERT_TRUE(usage) << usage.status().to_string();
  auto info = client->call("sys.info", json::object(), waiting());
  ASSERT_TRUE(info);
  double container_s = (*usage)["container_s"].get<double>();
  EXPECT_GT(container_s, 0.0);
  EXPECT_LE(container_s, (*info)["uptime_s"].get<double>()) << "one clock: sys.info asked later";
  EXPECT_GE((*usage)["cpu_s"].get<double>(), 0.0);
  EXPECT_TRUE((*usage)["cpu_source"].is_string());
  EXPECT_EQ((*usage)["jobs"], json::array());
  EXPECT_GE((*usage)["gpus"]["count"].get<int>(), 0);
  EXPECT_DOUBLE_EQ((*usage)["gpu_s"].get<double>(), (*usage)["gpus"]["count"].get<int>() * container_s);
  auto refused = client->call("sys.usage", json{{"jobs", true}}, waiting());
  EXPECT_EQ(code_of(refused), ErrorCode::invalid_request);
  EXPECT_NE(refused.status().message().find("jobs"), std::string::npos) << refused.status().to_string();
  auto still = client->call("sys.ping", json::object(), waiting());
  EXPECT_TRUE(still) << "bad params change nothing";
}

TEST_F(SysTest, UnknownMethodIsUnknownMethod) {
  ASSERT_NO_FATAL_FAILURE(start());
  auto client = ipc_client();
  ASSERT_TRUE(client);
  auto result = client->call("sys.nope", json::object(), waiting());
  EXPECT_EQ(code_of(result), ErrorCode::unknown_method) << result.status().to_string();
  EXPECT_NE(result.status().message().find("sys.nope"), std::string::npos);
}

TEST_F(SysTest, ShutdownAnswersThenTheAgentExitsZero) {
  ASSERT_NO_FATAL_FAILURE(start());
  auto client = tcp_client();
  ASSERT_TRUE(client);
  auto result = client->call("sys.shutdown", json::object(), waiting());
  ASSERT_TRUE(result) << result.status().to_string();
  EXPECT_EQ(*result, json({{"shutting_down", true}}));
  auto code = agent_->wait_exit(milliseconds(10'000));
  ASSERT_TRUE(code) << "the agent is still running after sys.shutdown";
  EXPECT_EQ(*code, 0);
}

TEST_F(SysTest, ShutdownStopsRequestsInFlightAndTheirProcesses) {
  ASSERT_NO_FATAL_FAILURE(start());
  auto client = ipc_client();
  auto other = ipc_client();
  ASSERT_TRUE(client && other);
  std::vector<std::string> sleeper = {"sleep", "42.4"};
  auto exec = client->stream("proc.exec", json{{"argv", sleeper}}, waiting());
  ASSERT_TRUE(exec);
  ASSERT_TRUE(wait_until([&] { return !listed(*other, sleeper).empty(); }, milliseconds(5000)));
  ASSERT_TRUE(other->call("sys.shutdown", json::object(), waiting()));
  while (!(*exec)->ended()) {
    if (!(*exec)->next()) break;
  }
  // The exec ends one way or another: its process was terminated, or the agent answered unavailable.
  ASSERT_TRUE((*exec)->ended());
  auto code = agent_->wait_exit(milliseconds(10'000));
  ASSERT_TRUE(code);
  EXPECT_EQ(*code, 0);
}

}  // namespace
}  // namespace gpubox::testing
