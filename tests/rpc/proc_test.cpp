// proc.exec, proc.spawn, proc.signal and proc.list against the real agent.
#include <signal.h>

#include "tests/rpc/rpc_test_support.h"

namespace gpubox::testing {
namespace {

class ProcTest : public RpcTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(start());
    client_ = ipc_client();
    ASSERT_TRUE(client_);
  }

  Result<json> exec(const json& params) { return client_->call("proc.exec", params, waiting()); }

  std::unique_ptr<rpc::Client> client_;
};

TEST_F(ProcTest, ExecArgv) {
  auto result = exec(json{{"argv", {"/bin/echo", "hello", "two words"}}});
  ASSERT_TRUE(result) << result.status().to_string();
  EXPECT_EQ(bytes_of((*result)["stdout"]), "hello two words\n");
  EXPECT_EQ(bytes_of((*result)["stderr"]), "");
  EXPECT_EQ((*result)["exit_code"], 0);
  EXPECT_TRUE((*result)["signal"].is_null());
  EXPECT_EQ((*result)["timed_out"], false);
  EXPECT_EQ((*result)["stdout_truncated"], false);
  EXPECT_GT((*result)["pid"].get<int>(), 0);
  EXPECT_GE((*result)["wall_s"].get<double>(), 0.0);
  EXPECT_TRUE((*result)["stdout"].is_binary());
}

TEST_F(ProcTest, ExecShellWithEnvAndCwd) {
  auto result = exec(json{{"shell", "echo \"$GREETING $OTHER\"; pwd"},
                          {"env", {{"GREETING", "hi"}, {"OTHER", "there"}}},
                          {"cwd", agent_->dir()}});
  ASSERT_TRUE(result) << result.status().to_string();
  EXPECT_EQ(bytes_of((*result)["stdout"]), "hi there\n" + agent_->dir() + "\n");
  EXPECT_EQ((*result)["exit_code"], 0);
}

TEST_F(ProcTest, ExecStdinBytesIncludingNul) {
  std::string input("line one\n\0binary\xff tail", 22);
  auto result = exec(json{{"argv", {"cat"}}, {"stdin", rpc::binary(input)}});
  ASSERT_TRUE(result) << result.status().to_string();
  EXPECT_EQ(bytes_of((*result)["stdout"]), input);
  // A str is accepted where bytes are expected.
  auto text = exec(json{{"argv", {"cat"}}, {"stdin", "as text"}});
  ASSERT_TRUE(text);
  EXPECT_EQ(bytes_of((*text)["stdout"]), "as text");
  // Default: empty stdin, so cat ends at once.
  auto none = exec(json{{"argv", {"cat"}}});
  ASSERT_TRUE(none);
  EXPECT_EQ(bytes_of((*none)["stdout"]), "");
}

TEST_F(ProcTest, ExecExitCodeAndStderr) {
  auto result = exec(json{{"shell", "echo out; echo err >&2; exit 3"}});
  ASSERT_TRUE(result) << result.status().to_string();
  EXPECT_EQ((*result)["exit_code"], 3);
  EXPECT_EQ(bytes_of((*result)["stdout"]), "out\n");
  EXPECT_EQ(bytes_of((*result)["stderr"]), "err\n");
}

TEST_F(ProcTest, ExecKilledBySignalReportsTheSignal) {
  auto result = exec(json{{"shell", "kill -TERM $$"}});
  ASSERT_TRUE(result) << result.status().to_string();
  EXPECT_TRUE((*result)["exit_code"].is_null());
  EXPECT_EQ((*result)["signal"], SIGTERM);
}

TEST_F(ProcTest, ExecTimeoutKillsTheProcessGroup) {
  std::vector<std::string> sleeper = {"sleep", "42.1"};
  auto begin = Clock::now();
  auto result = exec(json{{"shell", "sleep 42.1 & sleep 42.1; wait"}, {"timeout_s", 0.3}});
  ASSERT_TRUE(result) << result.status().to_string();
  EXPECT_LT(Clock::now() - begin, milliseconds(5000));
  EXPECT_EQ((*result)["timed_out"], true);
  EXPECT_EQ((*result)["signal"], SIGKILL);
  EXPECT_GE((*result)["wall_s"].get<double>(), 0.3);
  EXPECT_TRUE(gone(*client_, sleeper)) << "a process of the group outlived the timeout";
}

TEST_F(ProcTest, ExecMaxOutputBytesTruncatesEachStream) {
  auto result = exec(json{{"shell", "head -c 100000 /dev/zero; head -c 50 /dev/zero >&2"}, {"max_output_bytes", 1000}});
  ASSERT_TRUE(result) << result.status().to_string();
  EXPECT_EQ(bytes_of((*result)["stdout"]).size(), 1000u);
  EXPECT_EQ((*result)["stdout_truncated"], true);
  EXPECT_EQ(bytes_of((*result)["stderr"]).size(), 50u);
  EXPECT_EQ((*result)["stderr_truncated"], false);
  EXPECT_EQ((*result)["exit_code"], 0);
  auto zero = exec(json{{"argv", {"echo", "x"}}, {"max_output_bytes", 0}});
  ASSERT_TRUE(zero);
  EXPECT_EQ(bytes_of((*zero)["stdout"]), "");
  EXPECT_EQ((*zero)["stdout_truncated"], true);
}

TEST_F(ProcTest, ExecRefusesBadParamsNamingTheField) {
  std::string nan_timeout;
  json::to_msgpack(json{{"argv", {"true"}}, {"timeout_s", std::nan("")}}, nan_timeout);
  struct Case {
    json params;
    std::string mentions;
  };
  std::vector<Case> cases = {
      {json::object(), "argv"},
      {json{{"argv", {"true"}}, {"shell", "true"}}, "argv"},
      {json{{"argv", json::array()}}, "argv"},
      {json{{"argv", {1, 2}}}, "argv[0]"},
      {json{{"argv", "true"}}, "argv"},
      {json{{"argv", {"true"}}, {"cwd", "relative"}}, "cwd"},
      {json{{"argv", {"true"}}, {"env", {{"A=B", "x"}}}}, "env"},
      {json{{"argv", {"true"}}, {"env", {{"A", 1}}}}, "env.A"},
      {json{{"argv", {"true"}}, {"timeout_s", -1}}, "timeout_s"},
      {json{{"argv", {"true"}}, {"timeout_s", "soon"}}, "timeout_s"},
      {json::from_msgpack(nan_timeout), "timeout_s"},
      {json{{"argv", {"true"}}, {"max_output_bytes", -5}}, "max_output_bytes"},
      {json{{"argv", {"true"}}, {"stdin", 5}}, "stdin"},
      {json{{"argv", {"true"}}, {"bogus", 1}}, "bogus"},
  };
  for (const auto& c : cases) {
    auto result = exec(c.params);
    EXPECT_EQ(code_of(result), ErrorCode::invalid_request) << c.params.dump() << " → " << result.status().to_string();
    EXPECT_NE(result.status().message().find(c.mentions), std::string::npos)
        << c.params.dump() << " → " << result.status().message();
  }
}

TEST_F(ProcTest, ExecOfAMissingProgramFails) {
  auto result = exec(json{{"argv", {"/no/such/program"}}});
  // Either the spawn fails, or the child reports the shell's 127.
  if (result) {
    EXPECT_EQ((*result)["exit_code"], 127) << result->dump();
  } else {
    EXPECT_EQ(code_of(result), ErrorCode::not_found) << result.status().to_string();
  }
}

TEST_F(ProcTest, SpawnStreamsOutputAndTakesStdin) {
  auto stream = client_->stream("proc.spawn", json{{"shell", "cat; echo done >&2"}}, waiting());
  ASSERT_TRUE(stream);
  auto first = (*stream)->next();
  ASSERT_TRUE(first && first->has_value());
  EXPECT_GT((*first)->body["pid"].get<int>(), 0);
  ASSERT_TRUE((*stream)->send(json{{"stdin", rpc::binary("abc")}}));
  std::vector<zmq::message_t> chunk;
  chunk.emplace_back(std::string("def"));
  ASSERT_TRUE((*stream)->send(json::object(), std::move(chunk)));
  ASSERT_TRUE((*stream)->send(json{{"eof", true}}));
  std::string out, err;
  while (!(*stream)->ended()) {
    auto next = (*stream)->next();
    ASSERT_TRUE(next) << next.status().to_string();
    if (!next->has_value()) break;
    std::string name = (*next)->body.value("stream", "");
    ASSERT_EQ((*next)->attachments.size(), 1u);
    (name == "stdout" ? out : err) += (*next)->attachments[0].to_string();
  }
  ASSERT_TRUE((*stream)->result()) << (*stream)->result().status().to_string();
  const json& result = (*stream)->result().value();
  EXPECT_EQ(out, "abcdef");
  EXPECT_EQ(err, "done\n");
  EXPECT_EQ(result["exit_code"], 0);
  EXPECT_FALSE(result.contains("stdout"));
}

TEST_F(ProcTest, SignalAndList) {
  std::vector<std::string> sleeper = {"sleep", "42.2"};
  auto stream = client_->stream("proc.spawn", json{{"argv", sleeper}}, waiting());
  ASSERT_TRUE(stream);
  auto first = (*stream)->next();
  ASSERT_TRUE(first && first->has_value());
  int pid = (*first)->body["pid"];

  auto found = listed(*client_, sleeper);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0]["pid"], pid);
  EXPECT_EQ(found[0]["ppid"], agent_->pid());
  EXPECT_TRUE(found[0]["user"].is_string());
  EXPECT_TRUE(found[0]["state"].is_string());
  EXPECT_GE(found[0]["rss_bytes"].get<long long>(), 0);
  EXPECT_GE(found[0]["cpu_s"].get<double>(), 0.0);
  auto list = client_->call("proc.list", json::object(), waiting());
  ASSERT_TRUE(list);
  bool agent_listed = false;
  for (const auto& process : (*list)["processes"]) agent_listed |= process["pid"] == agent_->pid();
  EXPECT_TRUE(agent_listed);

  auto signalled = client_->call("proc.signal", json{{"pid", pid}, {"signal", SIGTERM}}, waiting());
  ASSERT_TRUE(signalled) << signalled.status().to_string();
  EXPECT_EQ(*signalled, json::object());
  while (!(*stream)->ended()) ASSERT_TRUE((*stream)->next());
  ASSERT_TRUE((*stream)->result()) << (*stream)->result().status().to_string();
  EXPECT_EQ((*stream)->result().value()["signal"], SIGTERM);
  EXPECT_TRUE(gone(*client_, sleeper));

  auto reaped = client_->call("proc.signal", json{{"pid", pid}, {"signal", SIGTERM}}, waiting());
  EXPECT_EQ(code_of(reaped), ErrorCode::not_found) << reaped.status().to_string();
  auto self = client_->call("proc.signal", json{{"pid", agent_->pid()}, {"signal", SIGKILL}}, waiting());
  EXPECT_EQ(code_of(self), ErrorCode::permission_denied) << self.status().to_string();
  auto bad = client_->call("proc.signal", json{{"pid", 1}, {"signal", SIGTERM}}, waiting());
  EXPECT_EQ(code_of(bad), ErrorCode::invalid_request) << bad.status().to_string();
  auto missing = client_->call("proc.signal", json{{"pid", pid}}, waiting());
  EXPECT_EQ(code_of(missing), ErrorCode::invalid_request) << missing.status().to_string();
  auto list_params = client_->call("proc.list", json{{"all", true}}, waiting());
  EXPECT_EQ(code_of(list_params), ErrorCode::invalid_request) << list_params.status().to_string();
}

TEST_F(ProcTest, SignalToAGroup) {
  std::vector<std::string> sleeper = {"sleep", "42.3"};
  auto stream = client_->stream("proc.spawn", json{{"shell", "sleep 42.3 & sleep 42.3; wait"}}, waiting());
  ASSERT_TRUE(stream);
  auto first = (*stream)->next();
  ASSERT_TRUE(first && first->has_value());
  int pid = (*first)->body["pid"];
  ASSERT_TRUE(wait_until([&] { return listed(*client_, sleeper).size() == 2; }, milliseconds(5000)));
  auto signalled = client_->call("proc.signal", json{{"pid", pid}, {"signal", SIGKILL}, {"group", true}}, waiting());
  ASSERT_TRUE(signalled) << signalled.status().to_string();
  while (!(*stream)->ended()) ASSERT_TRUE((*stream)->next());
  EXPECT_EQ((*stream)->result().value()["signal"], SIGKILL);
  EXPECT_TRUE(gone(*client_, sleeper));
}

}  // namespace
}  // namespace gpubox::testing
