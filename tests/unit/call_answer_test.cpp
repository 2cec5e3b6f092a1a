// CallContext::answer (rpc/call.h): a call answered from another thread while
// its handler still runs, over a real rpc::Server and rpc::Client on an ipc
// socket. The serve worker's results take this way (agent/serve/service.cpp).
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "rpc/client.h"
#include "rpc/server.h"

namespace gpubox::rpc {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

struct Endpoint {
  Endpoint() {
    char dir[] = "/tmp/gpubox-answer-XXXXXX";
    path = ::mkdtemp(dir) ? std::string(dir) : std::string();
  }
  ~Endpoint() {
    ::unlink((path + "/rpc.sock").c_str());
    ::rmdir(path.c_str());
  }
  std::string uri() const { return "ipc://" + path + "/rpc.sock"; }
  std::string path;
};

TEST(CallAnswer, AnotherThreadAnswersWhileTheHandlerStillRuns) {
  std::promise<void> client_got;
  auto got = client_got.get_future().share();
  std::promise<bool> second;
  MethodRegistry methods;
  methods.add("t.early", [&](CallContext& call) -> Result<json> {
    std::thread other([&] {
      call.set_error_details(json::object());
      EXPECT_TRUE(call.answer(json{{"from", "other"}}));
    });
    other.join();
    second.set_value(call.answer(json{{"from", "again"}}));  // only once
    // The client has its answer while this handler is still here.
    EXPECT_EQ(got.wait_for(10s), std::future_status::ready);
    return json{{"from", "handler"}};  // ignored
  });
  Endpoint endpoint;
  ServerOptions options;
  options.endpoints = {endpoint.uri()};
  auto server = Server::start(std::move(options), methods);
  ASSERT_TRUE(server) << server.status().message();
  ClientOptions connect;
  connect.endpoint = endpoint.uri();
  auto client = Client::connect(connect);
  ASSERT_TRUE(client) << client.status().message();
  CallOptions call_options;
  call_options.wait = 10s;
  auto result = (*client)->call("t.early", json::object(), call_options);
  client_got.set_value();
  ASSERT_TRUE(result) << result.status().message();
  EXPECT_EQ((*result)["from"], "other");
  EXPECT_FALSE(second.get_future().get());
}

TEST(CallAnswer, AStoppedCallCannotBeAnswered) {
  std::promise<bool> answered;
  MethodRegistry methods;
  methods.add("t.wait", [&](CallContext& call) -> Result<json> {
    for (int i = 0; i < 1000 && !call.stopped(); ++i) std::this_thread::sleep_for(10ms);
    answered.set_value(call.answer(json{{"late", true}}));
    return json::object();
  });
  Endpoint endpoint;
  ServerOptions options;
  options.endpoints = {endpoint.uri()};
  auto server = Server::start(std::move(options), methods);
  ASSERT_TRUE(server) << server.status().message();
  ClientOptions connect;
  connect.endpoint = endpoint.uri();
  auto client = Client::connect(connect);
  ASSERT_TRUE(client);
  CallOptions call_options;
  call_options.timeout_ms = 100;
  auto result = (*client)->call("t.wait", json::object(), call_options);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.status().code(), ErrorCode::deadline_exceeded);
  auto late = answered.get_future();
  ASSERT_EQ(late.wait_for(15s), std::future_status::ready);
  EXPECT_FALSE(late.get());
}

}  // namespace
}  // namespace gpubox::rpc
