// The agent's model host (agent/modeld_supervisor.h, agent/methods/model_forwarder.cpp)
// with the real agent as PID 1 of a sandbox and tests/integration/fake_modeld
// as gpubox-modeld (model_host.binary): forwarding byte-exact, flow control,
// cancel and deadline reaching modeld, a crash mid-call, restarts, and the
// `unavailable` answers while no modeld serves.
#include <gmock/gmock.h>

#include <sys/stat.h>

#include <filesystem>
#include <random>
#include <thread>

#include "rpc/client.h"
#include "tests/integration/integration_test.h"
#include "tests/support/agent_rpc.h"

namespace gpubox::testing {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

constexpr milliseconds kAnswer{10'000};

json host_config(json models = json::array({{{"name", "tiny"}, {"path", "/models/tiny"}}}), json env = json::object()) {
  return json{{"model_host", {{"binary", FAKE_MODELD_PATH}, {"models", std::move(models)}}},
              {"env", std::move(env)},
              {"kernel", {{"enabled", false}}}};
}

class ModeldSupervisorTest : public IntegrationTest {
 protected:
  void start_agent(json config) {
    AgentOptions options;
    options.config = std::move(config);
    options.flags = {"--grace-seconds", "2"};
    box_ = start_ready(options);
    ASSERT_TRUE(box_);
  }

  std::unique_ptr<rpc::Client> client() {
    auto connected = connect_ipc(*box_);
    EXPECT_TRUE(connected) << connected.status().to_string();
    return connected ? std::move(*connected) : nullptr;
  }

  static rpc::CallOptions waiting(std::uint64_t timeout_ms = 0) {
    rpc::CallOptions options;
    options.wait = kAnswer;
    options.timeout_ms = timeout_ms;
    return options;
  }

  json model_host_info(rpc::Client& c) {
    auto info = c.call("sys.info", json::object(), waiting());
    EXPECT_TRUE(info) << info.status().to_string();
    return info ? (*info)["model_host"] : json();
  }

  // Waits until sys.info says the model host runs and every model is ready.
  bool wait_running(rpc::Client& c, int restarts = 0) {
    return wait_until(
        [&] {
          json host = model_host_info(c);
          if (host.value("state", "") != "running" || host.value("restarts", -1) != restarts) return false;
          for (const auto& model : host["models"]) {
            if (model.value("state", "") != "ready") return false;
          }
          return true;
        },
        kAnswer);
  }

  void TearDown() override {
    if (HasFailure() && box_) std::cerr << "agent log:\n" << box_->log_text() << "\nstderr:\n" << box_->stderr_text();
    box_.reset();
    IntegrationTest::TearDown();
  }

  std::unique_ptr<AgentProcess> box_;
};

std::string random_bytes(std::size_t size) {
  std::mt19937 random(42);
  std::string bytes(size, '\0');
  for (auto& byte : bytes) byte = static_cast<char>(random());
  return bytes;
}

TEST_F(ModeldSupervisorTest, ParamsAndAttachmentsAreForwardedByteExact) {
  start_agent(host_config());
  auto c = client();
  ASSERT_TRUE(wait_running(*c));
  json host = model_host_info(*c);
  EXPECT_GT(host.value("pid", 0), 0);
  ASSERT_EQ(host["models"].size(), 1u);
  EXPECT_EQ(host["models"][0]["name"], "tiny");

  std::string big = random_bytes(3 << 20);
  std::vector<zmq::message_t> attachments;
  attachments.emplace_back(big.data(), big.size());
  attachments.emplace_back();  // an empty frame stays an empty frame
  attachments.emplace_back("\0\xff tail", 7);
  rpc::Header header;
  header.id = c->next_id();
  header.method = "model.echo";
  json params = {{"text", "héllo"}, {"n", 7}, {"nested", {{"list", {1, 2.5, nullptr, true}}}},
                 {"bin", json::binary({0, 1, 2, 255})}};
  ASSERT_TRUE(c->send_message(header, params, std::move(attachments)));
  auto reply = c->receive(header.id, kAnswer);
  ASSERT_TRUE(reply) << reply.status().to_string();
  ASSERT_EQ(reply->kind, rpc::Kind::result) << reply->body.dump();
  EXPECT_EQ(reply->body["params"], params);
  ASSERT_EQ(reply->attachments.size(), 3u);
  EXPECT_EQ(reply->attachments[0].to_string(), big);
  EXPECT_EQ(reply->attachments[1].size(), 0u);
  EXPECT_EQ(reply->attachments[2].to_string(), std::string("\0\xff tail", 7));

  auto info = c->call("sys.info", json::object(), waiting());
  ASSERT_TRUE(info);
  EXPECT_THAT((*info)["methods"].dump(), HasSubstr("\"model.*\""));
  EXPECT_THAT((*info)["methods"].dump(), HasSubstr("\"gpu.*\""));
}

TEST_F(ModeldSupervisorTest, ASlowReaderSlowsModeldAndEveryItemArrives) {
  start_agent(host_config());
  auto c = client();
  ASSERT_TRUE(wait_running(*c));
  rpc::CallOptions options = waiting();
  options.window = 2;
  auto stream = c->stream("model.count", {{"n", 1000}}, std::move(options));
  ASSERT_TRUE(stream);
  // Nobody reads: modeld must be held back by the credit, not run ahead into the agent's memory.
  auto other = client();
  auto sent = [&] {
    auto stats = other->call("model.stats", json::object(), waiting());
    EXPECT_TRUE(stats) << stats.status().to_string();
    return stats ? stats->value("count_sent", -1LL) : -1LL;
  };
  ASSERT_TRUE(wait_until([&] { return sent() > 0; }, kAnswer));
  std::this_thread::sleep_for(milliseconds(700));
  long long ahead = sent();
  EXPECT_LE(ahead, 12) << "modeld ran ahead of a reader that took nothing";
  long long count = 0;
  while (true) {
    auto item = (*stream)->next();
    ASSERT_TRUE(item) << item.status().to_string();
    if (!*item) break;
    EXPECT_EQ((**item).body["i"], count);
    ++count;
  }
  EXPECT_EQ(count, 1000);
  ASSERT_TRUE((*stream)->result()) << (*stream)->result().status().to_string();
  EXPECT_EQ((*stream)->result()->value("sent", 0), 1000);
}

TEST_F(ModeldSupervisorTest, CallerDataReachesModeldUnderItsCredit) {
  start_agent(host_config());
  auto c = client();
  ASSERT_TRUE(wait_running(*c));
  auto stream = c->stream("model.upload", json::object(), waiting());
  ASSERT_TRUE(stream);
  std::string chunk = random_bytes(100'000);
  for (int i = 0; i < 20; ++i) {
    std::vector<zmq::message_t> attachments;
    attachments.emplace_back(chunk.data(), chunk.size());
    ASSERT_TRUE((*stream)->send(json{{"eof", i == 19}}, std::move(attachments)));
  }
  while (true) {
    auto item = (*stream)->next();
    ASSERT_TRUE(item);
    if (!*item) break;
  }
  ASSERT_TRUE((*stream)->result()) << (*stream)->result().status().to_string();
  EXPECT_EQ((*stream)->result()->value("bytes", 0LL), 20LL * 100'000);
  EXPECT_EQ((*stream)->result()->value("items", 0LL), 20);
}

TEST_F(ModeldSupervisorTest, CancelAndDeadlineReachModeld) {
  start_agent(host_config());
  auto c = client();
  ASSERT_TRUE(wait_running(*c));
  auto other = client();
  auto stats = [&] {
    auto got = other->call("model.stats", json::object(), waiting());
    EXPECT_TRUE(got) << got.status().to_string();
    return got ? *got : json();
  };

  auto stream = c->stream("model.sleep", {{"ms", 60'000}}, waiting());
  ASSERT_TRUE(stream);
  ASSERT_TRUE(wait_until([&] { return stats().value("calls", 0) >= 1; }, kAnswer));
  auto cancelled_at = Clock::now();
  ASSERT_TRUE((*stream)->cancel());
  while (!(*stream)->ended()) ASSERT_TRUE((*stream)->next());
  EXPECT_EQ((*stream)->result().status().code(), ErrorCode::cancelled);
  EXPECT_TRUE(wait_until([&] { return stats().value("last_stop", "") == "cancelled"; }, milliseconds(3000)))
      << stats().dump();
  EXPECT_LT(seconds_between(cancelled_at, Clock::now()), 3.0);
  EXPECT_EQ(stats().value("last_timeout_ms", -2LL), 0) << "a call without a deadline got one";

  auto timed = c->call("model.sleep", {{"ms", 60'000}}, waiting(800));
  EXPECT_EQ(timed.status().code(), ErrorCode::deadline_exceeded) << timed.status().to_string();
  json after = stats();
  EXPECT_GT(after.value("last_timeout_ms", 0LL), 0);
  EXPECT_LE(after.value("last_timeout_ms", 0LL), 801);
  EXPECT_TRUE(wait_until([&] {
    std::string stop = stats().value("last_stop", "");
    return stop == "deadline_exceeded" || stop == "cancelled";
  }, milliseconds(3000))) << stats().dump();
}

TEST_F(ModeldSupervisorTest, ModeldCrashingMidCallIsUnavailableAtOnceThenComesBack) {
  start_agent(host_config());
  auto c = client();
  ASSERT_TRUE(wait_running(*c));
  pid_t first_pid = model_host_info(*c).value("pid", 0);
  auto sleeping = c->stream("model.sleep", {{"ms", 60'000}}, waiting());
  ASSERT_TRUE(sleeping);

  auto other = client();
  // modeld has the call before it crashes: else the call ends failing to reach it (under load), not with its end.
  ASSERT_TRUE(wait_until([&] {
    auto stats = other->call("model.stats", json::object(), waiting());
    return stats && stats->value("calls", 0) >= 1;
  }, kAnswer));
  auto crash_at = Clock::now();
  auto crashed = other->call("model.crash", json::object(), waiting());
  EXPECT_EQ(crashed.status().code(), ErrorCode::unavailable) << crashed.status().to_string();
  while (!(*sleeping)->ended()) ASSERT_TRUE((*sleeping)->next());
  Status status = (*sleeping)->result().status();
  EXPECT_LT(seconds_between(crash_at, Clock::now()), 2.0);
  EXPECT_EQ(status.code(), ErrorCode::unavailable);
  EXPECT_THAT(status.message(), HasSubstr("the model host exited (killed by SIGABRT"));
  EXPECT_THAT(status.message(), HasSubstr("during model.sleep; it is restarting and reloading its models"));

  // The agent is untouched and modeld comes back with its models.
  auto ping = other->call("sys.ping", json::object(), waiting());
  EXPECT_TRUE(ping) << ping.status().to_string();
  ASSERT_TRUE(wait_running(*c, 1)) << model_host_info(*c).dump();
  json host = model_host_info(*c);
  EXPECT_NE(host.value("pid", 0), first_pid);
  EXPECT_THAT(host.value("last_exit", ""), HasSubstr("SIGABRT"));
  auto echo = c->call("model.echo", {{"again", true}}, waiting());
  ASSERT_TRUE(echo) << echo.status().to_string();
  EXPECT_EQ((*echo)["params"]["again"], true);
  EXPECT_TRUE(box_->running());
}

TEST_F(ModeldSupervisorTest, AHungModeldIsKilledAndRestarted) {
  start_agent(host_config());
  auto c = client();
  ASSERT_TRUE(wait_running(*c));
  int pid = model_host_info(*c).value("pid", 0);
  rpc::CallOptions patient;
  patient.wait = milliseconds(60'000);
  auto sleeping = c->stream("model.sleep", {{"ms", 120'000}}, patient);
  ASSERT_TRUE(sleeping);
  auto other = client();
  // modeld has the call before it stops: else the call ends failing to reach it (under load), not with its end.
  ASSERT_TRUE(wait_until([&] {
    auto stats = other->call("model.stats", json::object(), waiting());
    return stats && stats->value("calls", 0) >= 1;
  }, kAnswer));
  // SIGSTOP: alive, but answering nothing, modeld.status included.
  auto stopped = other->call("proc.exec", {{"argv", {"kill", "-STOP", std::to_string(pid)}}}, waiting());
  ASSERT_TRUE(stopped) << stopped.status().to_string();
  ASSERT_EQ(stopped->value("exit_code", -1), 0) << stopped->dump();
  while (!(*sleeping)->ended()) ASSERT_TRUE((*sleeping)->next());
  EXPECT_EQ((*sleeping)->result().status().code(), ErrorCode::unavailable);
  EXPECT_THAT((*sleeping)->result().status().message(), HasSubstr("the model host exited (killed by SIGKILL) during model.sleep"));
  EXPECT_TRUE(other->call("sys.ping", json::object(), waiting()));
  ASSERT_TRUE(wait_running(*c, 1)) << model_host_info(*c).dump();
  EXPECT_TRUE(c->call("model.echo", json::object(), waiting()));
  EXPECT_FALSE(log_with(*box_, "model host unresponsive: killing it to restart it").empty());
}

TEST_F(ModeldSupervisorTest, WhileStartingCallsAreUnavailableNamingTheLoadingModels) {
  start_agent(host_config(json::array({{{"name", "tiny"}, {"path", "/models/tiny"}},
                                       {{"name", "small"}, {"path", "/models/small"}}}),
                          {{"FAKE_MODELD_START_DELAY_MS", "2500"}}));
  auto c = client();
  auto early = c->call("model.echo", json::object(), waiting());
  EXPECT_EQ(early.status().code(), ErrorCode::unavailable);
  EXPECT_THAT(early.status().message(), HasSubstr("the model host is starting (models loading: tiny, small)"));
  json host = model_host_info(*c);
  EXPECT_EQ(host.value("state", ""), "starting");
  ASSERT_EQ(host["models"].size(), 2u);
  EXPECT_EQ(host["models"][0]["state"], "loading");
  ASSERT_TRUE(wait_running(*c));
  EXPECT_TRUE(c->call("model.echo", json::object(), waiting()));
}

TEST_F(ModeldSupervisorTest, WithoutAModelHostSectionModelCallsSaySo) {
  start_agent(json{{"kernel", {{"enabled", false}}}});
  auto c = client();
  for (const char* method : {"model.generate", "gpu.info"}) {
    auto result = c->call(method, json::object(), waiting());
    EXPECT_EQ(result.status().code(), ErrorCode::unavailable) << method;
    EXPECT_EQ(result.status().message(), "no model host: the config has no model_host section");
  }
  EXPECT_EQ(model_host_info(*c).value("state", ""), "off");
  EXPECT_EQ(c->call("models.list", json::object(), waiting()).status().code(), ErrorCode::unknown_method);
}

TEST_F(ModeldSupervisorTest, AMissingBinaryIsAFailedModelHostNotAFailedAgent) {
  json config = host_config();
  config["model_host"]["binary"] = "/nonexistent/gpubox-modeld";
  start_agent(config);
  auto c = client();
  json host = model_host_info(*c);
  EXPECT_EQ(host.value("state", ""), "failed");
  EXPECT_THAT(host.value("error", ""), HasSubstr("gpubox-modeld not found: /nonexistent/gpubox-modeld"));
  auto result = c->call("model.echo", json::object(), waiting());
  EXPECT_EQ(result.status().code(), ErrorCode::unavailable);
  EXPECT_THAT(result.status().message(), HasSubstr("the model host failed: gpubox-modeld not found"));
  EXPECT_TRUE(c->call("sys.ping", json::object(), waiting()));
}

TEST_F(ModeldSupervisorTest, AHiddenModelsPathNeverShows) {
  // Real directories: the agent bind-mounts a hidden model's files at a random path.
  std::string dir = make_temp_dir("gpubox-hidden-model");
  std::string secret = dir + "/secret-llama-weights";
  ASSERT_EQ(::mkdir(secret.c_str(), 0755), 0);
  start_agent(host_config(json::array({{{"name", "broken-model"}, {"path", secret}, {"hidden", true}}})));
  auto c = client();
  ASSERT_TRUE(wait_until([&] { return model_host_info(*c).value("state", "") == "running"; }, kAnswer));
  ASSERT_TRUE(wait_until([&] { return model_host_info(*c)["models"][0].value("state", "") == "failed"; }, kAnswer));
  json host = model_host_info(*c);
  EXPECT_THAT(host["models"][0].value("error", ""), HasSubstr("cannot open <hidden>/config.json"));
  auto info = c->call("sys.info", json::object(), waiting());
  ASSERT_TRUE(info);
  EXPECT_EQ(info->dump().find("secret-llama-weights"), std::string::npos) << info->dump();
  EXPECT_EQ(info->dump().find(box_->state_dir() + "/models/"), std::string::npos) << info->dump();
  auto failed = c->call("model.fail", json::object(), waiting());
  EXPECT_EQ(failed.status().code(), ErrorCode::not_found);
  EXPECT_THAT(failed.status().message(), HasSubstr("files: <hidden>"));
  EXPECT_EQ(failed.status().message().find("secret-llama-weights"), std::string::npos);
  EXPECT_EQ(box_->log_text().find("secret-llama-weights"), std::string::npos);
  box_.reset();
  std::filesystem::remove_all(dir);
}

TEST_F(ModeldSupervisorTest, TheKernelsPythonReachesTheModelHostThroughGPUBOX_ENDPOINT) {
  json config = host_config();
  config["kernel"] = {{"python", "/usr/bin/python3"}, {"mode", "plain"}};
  config["env"] = {{"PYTHONPATH", std::string(GPUBOX_SOURCE_DIR) + "/python"}};
  start_agent(config);
  auto c = client();
  ASSERT_TRUE(wait_running(*c));
  std::string code =
      "import os, gpubox\n"
      "reply = gpubox.Client().call('model.echo', x=41)\n"
      "print('ENDPOINT', os.environ['GPUBOX_ENDPOINT'], 'ECHO', reply['params']['x'] + 1)\n";
  auto stream = c->stream("kernel.execute", {{"code", code}}, waiting());
  ASSERT_TRUE(stream);
  std::string output;
  while (true) {
    auto item = (*stream)->next();
    ASSERT_TRUE(item) << item.status().to_string();
    if (!*item) break;
    output += (**item).body.dump();
  }
  ASSERT_TRUE((*stream)->result()) << (*stream)->result().status().to_string();
  EXPECT_EQ((*stream)->result()->value("status", ""), "ok") << (*stream)->result()->dump() << output;
  EXPECT_THAT(output, HasSubstr("ENDPOINT ipc://" + box_->state_dir() + "/rpc.sock ECHO 42"));
}

TEST_F(ModeldSupervisorTest, ShutdownStopsModeldWithTheRest) {
  start_agent(host_config());
  auto c = client();
  ASSERT_TRUE(wait_running(*c));
  c.reset();
  ASSERT_TRUE(box_->signal(SIGTERM));
  EXPECT_EQ(box_->wait_exit(kExitTimeout), 0) << box_->stderr_text();
}

}  // namespace
}  // namespace gpubox::testing
