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

class Client;

// A streaming request. next() yields DATA until the request ends; then
// result() holds the RESULT body or the ERROR status.
class Stream {
 public:
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream();

  // The next DATA message; nullopt once the request has ended.
  Result<std::optional<Incoming>> next();
  // Sends DATA to the agent, waiting for the credit it grants.
  Status send(const nlohmann::json& body, std::vector<zmq::message_t> attachments = {});
  Status cancel();
  bool ended() const { return final_.has_value(); }
  // REQUIRES: ended().
  const Result<nlohmann::json>& result() const { return *final_; }
  std::uint64_t id() const { return id_; }

 private:
  friend class Client;
  Stream(Client& client, std::uint64_t id, std::uint64_t window, std::chrono::milliseconds wait);
  Status pump();  // receives one message for this stream

  Client& client_;
  std::uint64_t id_;
  std::uint64_t window_;
  std::uint64_t consumed_since_grant_ = 0;
  std::uint64_t credited_ahead_ = 0;  // buffered DATA credited before it was consumed
  std::uint64_t send_credit_ = 0;
  std::chrono::milliseconds wait_;
  std::deque<Incoming> data_;
  std::optional<Result<nlohmann::json>> final_;
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

  // For a caller that polls this client's socket beside its own sockets (one
  // thread): the socket as a ZMQ_POLLIN item, and the next message for id if
  // one has already arrived (nullopt, never waiting, when none has).
  zmq::pollitem_t poll_item() { return {socket_.handle(), 0, ZMQ_POLLIN, 0}; }
  Result<std::optional<Received>> try_receive(std::uint64_t id);

 private:
  friend class Stream;
  Client(zmq::context_t context, zmq::socket_t socket, std::string endpoint);
  Status start(const std::string& method, const nlohmann::json& params, const CallOptions& options, std::uint64_t id);

  zmq::context_t context_;
  zmq::socket_t socket_;
  std::string endpoint_;
  std::uint64_t next_id_ = 1;
  std::map<std::uint64_t, std::deque<Received>> pending_;  // messages for other requests
};

}  // namespace gpubox::rpc
