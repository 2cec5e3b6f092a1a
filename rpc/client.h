// Client: one DEALER connection to an agent endpoint, for host/ and tests.
// Several requests may be in flight (streams, calls); a Client and its
// Streams belong to one thread.
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "rpc/call.h"
#include "rpc/keys.h"
#include "rpc/protocol.h"
#include "rpc/stream.h"
#include "base/status.h"

namespace gpubox::rpc {

struct ClientOptions {
  std::string endpoint;           // ipc://PATH or tcp://HOST:PORT
  std::string server_public_key;  // Z85; required for tcp://
  KeyPair client_keys;            // required for tcp://; generated when empty
  // connect() waits this long for the handshake (CURVE included); 0 = do not wait.
  std::chrono::milliseconds connect_timeout{10'000};
};

struct CallOptions {
  std::uint64_t timeout_ms = 0;          // the request's deadline at the agent; 0 = none
  std::uint64_t window = kDefaultWindow; // DATA credit for streams
  // DATA consumed before a Stream grants them back; 0 = half the window.
  std::uint64_t credit_batch = 0;
  std::vector<zmq::message_t>* attachments = nullptr;  // moved into the CALL
  // How long the client waits for each message before giving up with
  // `unavailable`; 0 = the deadline plus 5 s, or forever without one.
  std::chrono::milliseconds wait{0};
};

// A message received for a request: DATA, RESULT or ERROR.
struct Received {
  Kind kind = Kind::data;
  std::uint64_t credit = 0;
  nlohmann::json body;
  std::vector<zmq::message_t> attachments;
};

class Client {
 public:
  // Connects and, unless options.connect_timeout is 0, waits for the
  // handshake: unavailable when nothing answers in time, permission_denied
  // when the agent refuses this client's key.
  static Result<std::unique_ptr<Client>> connect(const ClientOptions& options);
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  ~Client();

  // One request, waiting for its RESULT (DATA, if any, is discarded).
  Result<nlohmann::json> call(const std::string& method, const nlohmann::json& params = nlohmann::json::object(),
                              CallOptions options = {});
  Result<std::unique_ptr<Stream>> stream(const std::string& method,
                                         const nlohmann::json& params = nlohmann::json::object(),
                                         CallOptions options = {});
  // Sends raw frames (for tests of malformed input).
  Status send_raw(std::vector<zmq::message_t> frames);
  // Receives the next message for id, waiting up to wait (0: forever).
  Result<Received> receive(std::uint64_t id, std::chrono::milliseconds wait);
  Status send_message(const Header& header, const nlohmann::json& body, std::vector<zmq::message_t> attachments = {});
  std::uint64_t next_id() { return next_id_++; }

 private:
  friend class Stream;  // polls through the two below
  zmq::pollitem_t poll_item() { return {socket_.handle(), 0, ZMQ_POLLIN, 0}; }
  // The next message for id if one has already arrived; nullopt, never waiting, when none has.
  Result<std::optional<Received>> try_receive(std::uint64_t id);
  Client(zmq::context_t context, zmq::socket_t socket, std::string endpoint);
  Status start(const std::string& method, const nlohmann::json& params, const CallOptions& options, std::uint64_t id);

  zmq::context_t context_;
  zmq::socket_t socket_;
  std::string endpoint_;
  std::uint64_t next_id_ = 1;
  std::map<std::uint64_t, std::deque<Received>> pending_;  // messages for other requests
};

}  // namespace gpubox::rpc
