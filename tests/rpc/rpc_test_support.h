// What the RPC integration tests share: a fixture that starts the real agent
// (tests/support/agent_process.h) as a plain child with CURVE on tcp and an
// ipc endpoint, a raw DEALER for hand-made frames, and small helpers over
// proc.list. Each test owns its agent; everything runs on the test's thread
// unless a test starts its own.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "rpc/client.h"
#include "rpc/params.h"
#include "rpc/protocol.h"
#include "tests/support/agent_rpc.h"

namespace gpubox::testing {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// Bounds that only decide how long a broken agent takes to fail a test.
inline constexpr milliseconds kAnswerTimeout{10'000};
// How long a test waits to conclude that no answer is coming.
inline constexpr milliseconds kSilence{1'500};

inline std::string bytes_of(const json& value) {
  if (value.is_binary()) return std::string(value.get_binary().begin(), value.get_binary().end());
  if (value.is_string()) return value.get<std::string>();
  return "<not bytes: " + value.dump() + ">";
}

inline ErrorCode code_of(const Result<json>& result) { return result.status().code(); }

// The rpc settings an RpcTest's agent starts with.
struct RpcAgentOptions {
  json rpc = json::object();              // merged over the fixture's "rpc" section
  bool authorize_client = true;           // put client_keys() on rpc.authorized_keys
  bool use_authorized_keys_file = false;  // … in DIR/authorized_keys instead
};

class RpcTest : public ::testing::Test {
 protected:
  // Starts the agent: "rpc" listens on tcp://127.0.0.1:0 (CURVE, a fresh
  // server key) and on its default ipc endpoint; log level debug; 2 s grace.
  void start(RpcAgentOptions options = {}) {
    auto keys = generate_agent_keys();
    ASSERT_TRUE(keys) << keys.status().to_string();
    keys_ = *keys;
    json rpc = curve_rpc_config(keys_, {"tcp://127.0.0.1:0", "ipc://{state_dir}/rpc.sock"});
    AgentOptions agent;
    agent.new_pid_namespace = false;
    agent.flags = {"--grace-seconds", "2"};
    if (options.use_authorized_keys_file) {
      agent.files["authorized_keys"] = "# test client\n" + keys_.client.public_key + "\n";
      rpc.erase("authorized_keys");
      rpc["authorized_keys_file"] = "{dir}/authorized_keys";
    } else if (!options.authorize_client) {
      // One key is required with a tcp endpoint; an unrelated one stands in.
      rpc["authorized_keys"] = {keys_.server.public_key};
    }
    for (const auto& [key, value] : options.rpc.items()) rpc[key] = value;
    agent.config = json{{"log", {{"level", "debug"}}}, {"rpc", rpc}};
    std::string error;
    agent_ = AgentProcess::start_ready(agent, &error);
    ASSERT_TRUE(agent_) << error;
    auto listening = rpc_listening(*agent_);
    ASSERT_TRUE(listening) << "no \"rpc listening\" line in the log:\n" << agent_->log_text();
    ASSERT_EQ(listening->public_key, keys_.server.public_key) << "the log names another public key";
    tcp_endpoint_ = listening->tcp;
  }

  void TearDown() override {
    if (HasFailure() && agent_) std::cerr << "agent log:\n" << agent_->log_text() << "agent stderr:\n" << agent_->stderr_text();
  }

  const std::string& tcp_endpoint() const { return tcp_endpoint_; }
  const std::string& server_public_key() const { return keys_.server.public_key; }
  const rpc::KeyPair& client_keys() const { return keys_.client; }

  // A client on the tcp endpoint with the authorized key pair (or `keys`).
  Result<std::unique_ptr<rpc::Client>> connect_tcp(std::optional<rpc::KeyPair> keys = std::nullopt,
                                                   milliseconds timeout = milliseconds(5000)) const {
    return gpubox::testing::connect_tcp(tcp_endpoint_, keys_.server.public_key, keys.value_or(keys_.client), timeout);
  }

  std::unique_ptr<rpc::Client> tcp_client() {
    auto client = connect_tcp();
    EXPECT_TRUE(client) << client.status().to_string();
    return client ? std::move(*client) : nullptr;
  }

  std::unique_ptr<rpc::Client> ipc_client() {
    auto client = connect_ipc(*agent_);
    EXPECT_TRUE(client) << client.status().to_string();
    return client ? std::move(*client) : nullptr;
  }

  static rpc::CallOptions waiting(milliseconds wait = kAnswerTimeout) {
    rpc::CallOptions options;
    options.wait = wait;
    return options;
  }

  // The processes proc.list reports whose cmdline is exactly argv.
  static std::vector<json> listed(rpc::Client& client, const std::vector<std::string>& argv) {
    std::vector<json> found;
    auto list = client.call("proc.list", json::object(), waiting());
    EXPECT_TRUE(list) << list.status().to_string();
    if (!list) return found;
    for (const auto& process : (*list)["processes"]) {
      if (process["cmdline"] == json(argv)) found.push_back(process);
    }
    return found;
  }

  // Waits until no process with this cmdline is alive (a zombie has no cmdline).
  static bool gone(rpc::Client& client, const std::vector<std::string>& argv) {
    return wait_until([&] { return listed(client, argv).empty(); }, milliseconds(5000));
  }

  std::unique_ptr<AgentProcess> agent_;
  AgentKeys keys_;
  std::string tcp_endpoint_;
};

// A DEALER that sends frames exactly as given: for malformed messages.
class RawPeer {
 public:
  explicit RawPeer(const std::string& endpoint) : socket_(context_, zmq::socket_type::dealer) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.connect(endpoint);
  }
  // With CURVE: the server's key and this client's pair.
  RawPeer(const std::string& endpoint, const std::string& server_key, const rpc::KeyPair& keys)
      : socket_(context_, zmq::socket_type::dealer) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.set(zmq::sockopt::curve_serverkey, server_key);
    socket_.set(zmq::sockopt::curve_publickey, keys.public_key);
    socket_.set(zmq::sockopt::curve_secretkey, keys.secret_key);
    socket_.connect(endpoint);
  }

  void send(const std::vector<std::string>& frames) {
    std::vector<zmq::const_buffer> buffers;
    for (const auto& frame : frames) buffers.push_back(zmq::buffer(frame));
    zmq::send_multipart(socket_, buffers);
  }
  void send(const rpc::Header& header, const json& body = json::object(), std::vector<std::string> attachments = {}) {
    std::vector<std::string> frames = {rpc::encode_header(header), rpc::encode_body(body)};
    for (auto& attachment : attachments) frames.push_back(std::move(attachment));
    send(frames);
  }
  void call(std::uint64_t id, const std::string& method, const json& params = json::object()) {
    send(header(id, rpc::Kind::call, method), params);
  }

  struct Message {
    rpc::Header header;
    json body;
    std::vector<std::string> attachments;
    std::string code() const { return body.value("code", ""); }
  };
  // The next message from the agent, or nullopt when none comes within wait.
  std::optional<Message> receive(milliseconds wait = kAnswerTimeout) {
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, wait);
    if (!(item.revents & ZMQ_POLLIN)) return std::nullopt;
    std::vector<zmq::message_t> frames;
    (void)zmq::recv_multipart(socket_, std::back_inserter(frames));
    EXPECT_GE(frames.size(), 2u);
    if (frames.size() < 2) return std::nullopt;
    auto decoded = rpc::decode_header(frames[0].to_string_view());
    EXPECT_TRUE(decoded) << decoded.status().to_string();
    auto body = rpc::decode_body(frames[1].to_string_view(), SIZE_MAX);
    EXPECT_TRUE(body) << body.status().to_string();
    if (!decoded || !body) return std::nullopt;
    Message message{*decoded, *body, {}};
    for (std::size_t i = 2; i < frames.size(); ++i) message.attachments.push_back(frames[i].to_string());
    return message;
  }
  // Pings with this id and returns every message that arrived before the
  // pong: the agent handles one connection's messages in order, so an answer
  // to anything sent before the ping has been sent by then unless it comes
  // from a worker.
  std::vector<Message> until_pong(std::uint64_t id) {
    call(id, "sys.ping", json{{"sync", id}});
    std::vector<Message> before;
    while (auto message = receive()) {
      if (message->header.id == id && message->header.kind == rpc::Kind::result) return before;
      before.push_back(std::move(*message));
    }
    ADD_FAILURE() << "no answer to sys.ping " << id;
    return before;
  }

  static rpc::Header header(std::uint64_t id, rpc::Kind kind, const std::string& method = "", std::uint64_t credit = 0) {
    rpc::Header h;
    h.id = id;
    h.kind = kind;
    h.method = method;
    h.credit = credit;
    return h;
  }

 private:
  zmq::context_t context_{1};
  zmq::socket_t socket_;
};

}  // namespace gpubox::testing
