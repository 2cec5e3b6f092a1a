// Fuzzes the whole server: one in-process rpc::Server on an ipc:// endpoint
// (kept for the whole run), with a few trivial methods including a streaming
// one. Each input is cut into multipart messages (fuzz_input.h) that a raw
// DEALER sends as they are. Afterwards every CALL the input made is
// cancelled, and both that DEALER and a second, well-behaved one must still
// get an answer to sys.ping: a hostile message must neither crash the server
// nor stall it, nor affect another client. FUZZ_DISPATCH_VERBOSE=1 prints
// every answer the harness reads.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "rpc/inbound_stream.h"
#include "rpc/message.h"
#include "rpc/server.h"
#include "tests/fuzz/fuzz_input.h"

using namespace gpubox;
using nlohmann::json;

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_dispatch: %s\n", what);
  std::abort();
}

rpc::MethodRegistry make_registry() {
  rpc::MethodRegistry methods;
  methods.add(
      "sys.ping",
      [](rpc::CallContext& call) -> Result<json> {
        json result = {{"pong", true}};
        if (!call.params().empty()) result["echo"] = call.params();
        return result;
      },
      rpc::MethodRegistry::Dispatch::io_thread);
  methods.add("t.echo", [](rpc::CallContext& call) -> Result<json> {
    return json{{"params", call.params()}, {"attachments", call.attachments().size()}};
  });
  methods.add("t.fail", [](rpc::CallContext&) -> Result<json> { return Status(ErrorCode::not_found, "always"); });
  methods.add("t.throw", [](rpc::CallContext&) -> Result<json> { throw std::runtime_error("thrown"); });
  // Streams params.count (≤ 8) DATA messages, each with one attachment.
  methods.add("t.stream", [](rpc::CallContext& call) -> Result<json> {
    std::uint64_t count = 3;
    if (auto it = call.params().find("count"); it != call.params().end() && it->is_number_unsigned()) {
      count = std::min<std::uint64_t>(it->get<std::uint64_t>(), 8);
    }
    for (std::uint64_t i = 0; i < count; ++i) {
      std::vector<zmq::message_t> chunk;
      chunk.emplace_back(std::to_string(i));
      if (Status sent = call.send_data(json{{"i", i}}, std::move(chunk)); !sent) return sent;
    }
    return json::object();
  });
  // Grants 2 credits and takes client DATA until EOF, a stop or 20 ms of silence.
  methods.add("t.upload", [](rpc::CallContext& call) -> Result<json> {
    rpc::InboundStream stream(call, {.window = 2, .credit_batch = 1});
    std::size_t received = 0;
    while (true) {
      auto next = stream.next_within(std::chrono::milliseconds(20));
      if (!next) return next.status();
      if (!next->has_value()) break;
      ++received;
      if ((*next)->body.value("eof", false)) break;
    }
    return json{{"received", received}};
  });
  // Waits until stopped, at most 20 ms.
  methods.add("t.wait", [](rpc::CallContext& call) -> Result<json> {
    if (call.wait_stopped(std::chrono::milliseconds(20))) return call.stop_reason();
    return json::object();
  });
  return methods;
}

struct Decoded {
  rpc::Header header;
  json body;
};

// Receives one message within timeout; nullopt when none came.
// libFuzzer's timers (SIGALRM) interrupt blocking calls: EINTR means "try again".
std::optional<Decoded> receive(zmq::socket_t& socket, std::chrono::milliseconds timeout) {
  zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
  std::vector<zmq::message_t> frames;
  try {
    zmq::poll(&item, 1, timeout);
    if (!(item.revents & ZMQ_POLLIN)) return std::nullopt;
    if (!zmq::recv_multipart(socket, std::back_inserter(frames), zmq::recv_flags::dontwait)) return std::nullopt;
  } catch (const zmq::error_t& e) {
    if (e.num() == EINTR) return std::nullopt;
    throw;
  }
  if (frames.size() < 2) fail("server sent fewer than 2 frames");
  auto header = rpc::decode_header(frames[0].to_string_view());
  if (!header) fail("server sent a malformed header");
  auto body = rpc::decode_body(frames[1].to_string_view(), SIZE_MAX);
  if (!body) fail("server sent a malformed body");
  if (header->kind == rpc::Kind::error && !rpc::status_from_error_body(*body).message().size()) fail("ERROR without a message");
  return Decoded{*header, *body};
}

void send(zmq::socket_t& socket, const std::vector<std::string>& frames) {
  for (std::size_t i = 0; i < frames.size(); ++i) {
    auto flags = i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
    while (true) {
      try {
        socket.send(zmq::buffer(frames[i]), flags);
        break;
      } catch (const zmq::error_t& e) {
        if (e.num() != EINTR) throw;
      }
    }
  }
}

// Pings with an id no request of this input uses and reads until the pong
// comes back, discarding answers to earlier messages (they may trail).
void expect_pong(zmq::socket_t& socket, std::uint64_t id, std::uint64_t nonce) {
  rpc::Header ping;
  ping.id = id;
  ping.kind = rpc::Kind::call;
  ping.method = "sys.ping";
  send(socket, {rpc::encode_header(ping), rpc::encode_body(json{{"nonce", nonce}})});
  // Generous: a loaded machine may starve the (niced) fuzzer for seconds.
  auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < give_up) {
    auto message = receive(socket, std::chrono::milliseconds(1000));
    if (!message) continue;
    if (std::getenv("FUZZ_DISPATCH_VERBOSE")) {
      std::fprintf(stderr, "got id=%llu kind=%d body=%s\n", static_cast<unsigned long long>(message->header.id),
                   static_cast<int>(message->header.kind), message->body.dump().c_str());
    }
    if (message->header.id != id) continue;
    if (message->header.kind == rpc::Kind::result && message->body.value("echo", json::object()).value("nonce", 0ull) == nonce) return;
    if (message->header.kind == rpc::Kind::error) {
      // A call of this input may have ended just before its CANCEL without its
      // RESULT having been taken off the server's outbox yet: still in flight.
      if (rpc::status_from_error_body(message->body).code() != ErrorCode::resource_exhausted) fail("sys.ping answered with an ERROR");
      send(socket, {rpc::encode_header(ping), rpc::encode_body(json{{"nonce", nonce}})});
    }
  }
  fail("no answer to sys.ping within 30 s: the server is stuck");
}

struct Harness {
  Harness() {
    dir = std::filesystem::temp_directory_path() / ("gpubox-fuzz-dispatch-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    rpc::ServerOptions options;
    options.endpoints = {"ipc://" + (dir / "rpc.sock").string()};
    options.limits.max_body_bytes = 1024;
    options.limits.max_attachments = 4;
    options.limits.max_in_flight = 8;
    options.limits.max_method_bytes = 32;
    options.limits.max_message_bytes = 1 << 20;
    options.max_workers = 16;
    auto started = rpc::Server::start(std::move(options), registry);
    if (!started) fail(started.status().to_string().c_str());
    server = std::move(*started);
    fuzzed = connect();
    observer = connect();
  }

  std::unique_ptr<zmq::socket_t> connect() {
    auto socket = std::make_unique<zmq::socket_t>(context, zmq::socket_type::dealer);
    socket->set(zmq::sockopt::linger, 0);
    socket->connect(server->endpoints()[0]);
    return socket;
  }

  rpc::MethodRegistry registry = make_registry();
  std::filesystem::path dir;
  std::unique_ptr<rpc::Server> server;
  zmq::context_t context{1};
  std::unique_ptr<zmq::socket_t> fuzzed;
  std::unique_ptr<zmq::socket_t> observer;
  std::uint64_t nonce = 0;
};

// Never destroyed: the server lives for the whole run (libFuzzer exits without unwinding).
Harness* harness = nullptr;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // The server's threads (and ZeroMQ's) inherit this mask: libFuzzer's
  // signals then interrupt only this thread, as in the agent, which blocks
  // every signal before it starts a thread.
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &previous);
  harness = new Harness();  // NOLINT: lives for the whole run on purpose
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 16 * 1024) return -1;
  auto messages = fuzz::split_messages(data, size, 8, 8);
  std::set<std::uint64_t> called;
  // Every id the server may answer to, a malformed header's included (peek_request_id).
  std::set<std::uint64_t> answered;
  for (const auto& frames : messages) {
    std::vector<std::string> copy(frames.begin(), frames.end());
    // Remember what a CALL would start, so that it can be cancelled afterwards.
    if (auto header = rpc::decode_header(copy[0]); header && header->kind == rpc::Kind::call) called.insert(header->id);
    answered.insert(rpc::peek_request_id(copy[0]));
    send(*harness->fuzzed, copy);
  }
  for (std::uint64_t id : called) {
    rpc::Header cancel;
    cancel.id = id;
    cancel.kind = rpc::Kind::cancel;
    send(*harness->fuzzed, {rpc::encode_header(cancel), rpc::encode_body(json::object())});
  }
  // An id none of this input's messages carried.
  std::uint64_t ping_id = UINT64_MAX;
  while (answered.count(ping_id)) --ping_id;
  ++harness->nonce;
  expect_pong(*harness->fuzzed, ping_id, harness->nonce);
  expect_pong(*harness->observer, 1, harness->nonce);
  return 0;
}
