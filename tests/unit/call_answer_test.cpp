// CallContext::answer (rpc/call.h): a call answered from another thread while
// its handler still runs, or taken by a method's fast path on the I/O thread
// and answered later, and the server's FdWatch, over a real rpc::Server and
// rpc::Client on an ipc socket. The serve worker's results take these ways
// (agent/serve/service.cpp).
#include <stdlib.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <atomic>
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


// A server on a fresh ipc endpoint and a client connected to it.
struct Connected {
  explicit Connected(const MethodRegistry& methods) {
    ServerOptions options;
    options.endpoints = {endpoint.uri()};
    auto started = Server::start(std::move(options), methods);
    EXPECT_TRUE(started) << started.status().message();
    if (!started) return;
    server = std::move(*started);
    ClientOptions connect;
    connect.endpoint = endpoint.uri();
    auto connected = Client::connect(connect);
    EXPECT_TRUE(connected) << connected.status().message();
    if (connected) client = std::move(*connected);
  }
  Result<json> call(const std::string& method, std::uint64_t timeout_ms = 0) {
    CallOptions options;
    options.wait = 10s;
    options.timeout_ms = timeout_ms;
    return client->call(method, json::object(), options);
  }
  Endpoint endpoint;
  std::unique_ptr<Server> server;
  std::unique_ptr<Client> client;
};

// A pipe whose read end the tests watch.
struct Pipe {
  Pipe() { EXPECT_EQ(::pipe2(fds, O_CLOEXEC | O_NONBLOCK), 0); }
  ~Pipe() {
    ::close(fds[0]);
    ::close(fds[1]);
  }
  void poke() { EXPECT_EQ(::write(fds[1], "x", 1), 1); }
  int drain() {
    char bytes[64];
    ssize_t n = ::read(fds[0], bytes, sizeof bytes);
    return n > 0 ? static_cast<int>(n) : 0;
  }
  int fds[2] = {-1, -1};
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


TEST(FastPath, ATakenCallIsAnsweredLaterFromAnotherThreadAndTheHandlerNeverRuns) {
  std::atomic<int> handler_runs{0};
  std::thread answerer;
  std::promise<std::thread::id> fast_thread;
  MethodRegistry methods;
  methods.add(
      "t.fast", [&](CallContext&) -> Result<json> { ++handler_runs; return json{{"from", "handler"}}; },
      [&](const std::shared_ptr<CallContext>& call) {
        fast_thread.set_value(std::this_thread::get_id());
        answerer = std::thread([call] {
          std::this_thread::sleep_for(20ms);
          EXPECT_TRUE(call->answer(json{{"from", "answerer"}}));
        });
        return true;
      });
  Connected connected(methods);
  ASSERT_TRUE(connected.client);
  auto result = connected.call("t.fast");
  answerer.join();
  ASSERT_TRUE(result) << result.status().message();
  EXPECT_EQ((*result)["from"], "answerer");
  EXPECT_EQ(handler_runs.load(), 0);
  EXPECT_NE(fast_thread.get_future().get(), std::this_thread::get_id());
}

TEST(FastPath, ADeclinedOrThrowingFastPathLeavesTheCallToTheHandler) {
  std::atomic<int> tries{0};
  MethodRegistry methods;
  methods.add(
      "t.declines", [](CallContext&) -> Result<json> { return json{{"from", "handler"}}; },
      [&](const std::shared_ptr<CallContext>&) {
        ++tries;
        return false;
      });
  methods.add(
      "t.throws", [](CallContext&) -> Result<json> { return json{{"from", "handler"}}; },
      [&](const std::shared_ptr<CallContext>&) -> bool {
        ++tries;
        throw std::runtime_error("fast path broke");
      });
  Connected connected(methods);
  ASSERT_TRUE(connected.client);
  for (const char* method : {"t.declines", "t.throws"}) {
    auto result = connected.call(method);
    ASSERT_TRUE(result) << method << ": " << result.status().message();
    EXPECT_EQ((*result)["from"], "handler") << method;
  }
  EXPECT_EQ(tries.load(), 2);
}

TEST(FastPath, ATakenCallThatStopsRunsItsStopCallbackOnAWorkerAndCannotBeAnsweredAfter) {
  std::shared_ptr<CallContext> kept;
  std::promise<std::thread::id> io_thread, callback_thread;
  MethodRegistry methods;
  methods.add(
      "t.never", [](CallContext&) -> Result<json> { return json{{"from", "handler"}}; },
      [&](const std::shared_ptr<CallContext>& call) {
        io_thread.set_value(std::this_thread::get_id());
        kept = call;  // nobody answers: the deadline ends it
        call->on_stop([&callback_thread] { callback_thread.set_value(std::this_thread::get_id()); });
        return true;
      });
  Connected connected(methods);
  ASSERT_TRUE(connected.client);
  auto result = connected.call("t.never", /*timeout_ms=*/100);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.status().code(), ErrorCode::deadline_exceeded);
  auto callback = callback_thread.get_future();
  ASSERT_EQ(callback.wait_for(10s), std::future_status::ready);
  EXPECT_NE(callback.get(), io_thread.get_future().get());  // a worker: the callback may block
  EXPECT_FALSE(kept->answer(json{{"late", true}}));
}

TEST(FastPath, AnAnsweredCallNeverRunsItsStopCallback) {
  std::atomic<int> callback_runs{0};
  MethodRegistry methods;
  methods.add(
      "t.now", [](CallContext&) -> Result<json> { return json::object(); },
      [&](const std::shared_ptr<CallContext>& call) {
        call->on_stop([&callback_runs] { ++callback_runs; });
        EXPECT_TRUE(call->answer(json{{"at", "once"}}));
        return true;
      });
  Connected connected(methods);
  ASSERT_TRUE(connected.client);
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(connected.call("t.now"));
  connected.server.reset();  // shutdown stops whatever is still registered
  EXPECT_EQ(callback_runs.load(), 0);
}

TEST(FdWatch, ReadyRunsWhenReadableUntilItDeclinesAndNeverAfterUnwatch) {
  MethodRegistry methods;
  Connected connected(methods);
  ASSERT_TRUE(connected.server);
  Pipe once, kept;
  std::atomic<int> once_calls{0}, kept_calls{0};
  ASSERT_TRUE(connected.server->watch(once.fds[0], [&] {
    once.drain();
    ++once_calls;
    return false;  // no longer watched
  }));
  ASSERT_TRUE(connected.server->watch(kept.fds[0], [&] {
    kept.drain();
    ++kept_calls;
    return true;
  }));
  auto wait_for = [](std::atomic<int>& count, int value) {
    for (int i = 0; i < 1000 && count.load() < value; ++i) std::this_thread::sleep_for(5ms);
    return count.load();
  };
  once.poke();
  kept.poke();
  EXPECT_EQ(wait_for(once_calls, 1), 1);
  EXPECT_EQ(wait_for(kept_calls, 1), 1);
  kept.poke();
  EXPECT_EQ(wait_for(kept_calls, 2), 2);
  once.poke();
  connected.server->unwatch(kept.fds[0]);
  int after_unwatch = kept_calls.load();
  kept.poke();
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(kept_calls.load(), after_unwatch);
  EXPECT_EQ(once_calls.load(), 1);
}

TEST(FdWatch, AWatchedDescriptorAnswersATakenCallFromTheIoThread) {
  Pipe reply;
  std::shared_ptr<CallContext> waiting;
  std::thread::id io_thread, ready_thread;
  Server* server = nullptr;
  MethodRegistry methods;
  methods.add(
      "t.later", [](CallContext&) -> Result<json> { return json{{"from", "handler"}}; },
      [&](const std::shared_ptr<CallContext>& call) {
        io_thread = std::this_thread::get_id();
        waiting = call;
        server->watch(reply.fds[0], [&] {
          ready_thread = std::this_thread::get_id();
          EXPECT_TRUE(waiting->answer(json{{"bytes", reply.drain()}}));
          waiting.reset();
          return false;
        });
        reply.poke();  // readable before the I/O thread next polls: ready runs there
        return true;
      });
  Connected connected(methods);
  ASSERT_TRUE(connected.server);
  server = connected.server.get();
  auto result = connected.call("t.later");
  ASSERT_TRUE(result) << result.status().message();
  EXPECT_EQ((*result)["bytes"], 1);
  EXPECT_EQ(ready_thread, io_thread);
}

}  // namespace
}  // namespace gpubox::rpc
