#include "rpc/client.h"

#include <unistd.h>

#include <atomic>
#include <cstring>
#include <zmq_addon.hpp>

namespace gpubox::rpc {

namespace {

// Watches the socket's handshake through a ZeroMQ socket monitor.
Status await_handshake(zmq::context_t& context, zmq::socket_t& socket, const std::string& endpoint,
                       std::chrono::milliseconds timeout) {
  static std::atomic<int> counter{0};
  std::string address = "inproc://gpubox-monitor-" + std::to_string(++counter);
  if (zmq_socket_monitor(socket.handle(), address.c_str(),
                         ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                             ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) != 0) {
    return Status(ErrorCode::internal, "zmq_socket_monitor failed");
  }
  zmq::socket_t events(context, zmq::socket_type::pair);
  events.set(zmq::sockopt::linger, 0);
  events.connect(address);
  Status outcome(ErrorCode::unavailable, "cannot reach " + endpoint + " within " + std::to_string(timeout.count()) +
                                             " ms: is the agent running there?");
  auto give_up = Clock::now() + timeout;
  bool connect_called = false;
  while (Clock::now() < give_up) {
    if (!connect_called) {
      socket.connect(endpoint);
      connect_called = true;
    }
    zmq::pollitem_t item{events.handle(), 0, ZMQ_POLLIN, 0};
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(give_up - Clock::now());
    zmq::poll(&item, 1, std::max(left, std::chrono::milliseconds(0)));
    if (!(item.revents & ZMQ_POLLIN)) break;
    std::vector<zmq::message_t> frames;
    if (!zmq::recv_multipart(events, std::back_inserter(frames)) || frames.empty() || frames[0].size() < 6) continue;
    std::uint16_t event;
    std::memcpy(&event, frames[0].data(), sizeof event);
    if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
      outcome = Status::ok();
      break;
    }
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
      outcome = Status(ErrorCode::permission_denied, "the agent at " + endpoint + " refused this client's key (not on its allow-list)");
      break;
    }
    outcome = Status(ErrorCode::unavailable, "handshake with " + endpoint + " failed: wrong server key or not a gpubox agent");
    break;
  }
  zmq_socket_monitor(socket.handle(), nullptr, 0);
  return outcome;
}

std::chrono::milliseconds effective_wait(const CallOptions& options) {
  if (options.wait.count() > 0) return options.wait;
  if (options.timeout_ms > 0) return std::chrono::milliseconds(options.timeout_ms + 5000);
  return std::chrono::milliseconds(0);
}

}  // namespace

Result<std::unique_ptr<Client>> Client::connect(const ClientOptions& options) {
  zmq::context_t context(1);
  zmq::socket_t socket(context, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::linger, 0);
  socket.set(zmq::sockopt::sndhwm, 0);
  bool tcp = options.endpoint.rfind("tcp://", 0) == 0;
  if (!tcp && options.endpoint.rfind("ipc://", 0) != 0) {
    return Status(ErrorCode::invalid_request, "endpoint '" + options.endpoint + "': expected ipc://PATH or tcp://HOST:PORT");
  }
  if (tcp) {
    if (!is_z85_key(options.server_public_key)) {
      return Status(ErrorCode::invalid_request, "server public key: expected 40 Z85 characters");
    }
    KeyPair keys = options.client_keys;
    if (keys.public_key.empty()) {
      auto fresh = generate_keypair();
      if (!fresh) return fresh.status();
      keys = *fresh;
    }
    if (!is_z85_key(keys.public_key) || !is_z85_key(keys.secret_key)) {
      return Status(ErrorCode::invalid_request, "client keys: expected 40 Z85 characters each");
    }
    socket.set(zmq::sockopt::curve_serverkey, options.server_public_key);
    socket.set(zmq::sockopt::curve_publickey, keys.public_key);
    socket.set(zmq::sockopt::curve_secretkey, keys.secret_key);
  }
  if (!tcp && ::access(options.endpoint.c_str() + 6, F_OK) != 0) {
    return Status(ErrorCode::unavailable, "cannot reach " + options.endpoint + ": no such socket (is the agent running?)");
  }
  try {
    if (options.connect_timeout.count() > 0) {
      Status handshake = await_handshake(context, socket, options.endpoint, options.connect_timeout);
      if (!handshake) return handshake;
    } else {
      socket.connect(options.endpoint);
    }
  } catch (const zmq::error_t& e) {
    return Status(ErrorCode::invalid_request, "cannot connect to '" + options.endpoint + "': " + e.what());
  }
  return std::unique_ptr<Client>(new Client(std::move(context), std::move(socket), options.endpoint));
}

Client::Client(zmq::context_t context, zmq::socket_t socket, std::string endpoint)
    : context_(std::move(context)), socket_(std::move(socket)), endpoint_(std::move(endpoint)) {}

Client::~Client() = default;

Status Client::send_message(const Header& header, const nlohmann::json& body, std::vector<zmq::message_t> attachments) {
  std::vector<zmq::message_t> frames;
  std::string header_bytes = encode_header(header);
  std::string body_bytes = encode_body(body);
  frames.emplace_back(header_bytes.data(), header_bytes.size());
  frames.emplace_back(body_bytes.data(), body_bytes.size());
  for (auto& attachment : attachments) frames.push_back(std::move(attachment));
  return send_raw(std::move(frames));
}

Status Client::send_raw(std::vector<zmq::message_t> frames) {
  try {
    zmq::send_multipart(socket_, frames);
  } catch (const zmq::error_t& e) {
    return Status(ErrorCode::unavailable, std::string("send failed: ") + e.what());
  }
  return Status::ok();
}

Result<Received> Client::receive(std::uint64_t id, std::chrono::milliseconds wait) {
  auto give_up = Clock::now() + wait;
  while (true) {
    // Take what is already queued without a poll(2); wait only when nothing is.
    auto got = try_receive(id);
    if (!got) return got.status();
    if (*got) return std::move(**got);
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    long timeout = -1;
    if (wait.count() > 0) {
      timeout = std::max<long>(0, std::chrono::duration_cast<std::chrono::milliseconds>(give_up - Clock::now()).count());
    }
    zmq::poll(&item, 1, std::chrono::milliseconds(timeout));
    if (!(item.revents & ZMQ_POLLIN)) {
      return Status(ErrorCode::unavailable, "no answer from " + endpoint_ + " within " + std::to_string(wait.count()) +
                                                  " ms: is the agent running, and is this client's key authorized?");
    }
  }
}

Result<std::optional<Received>> Client::try_receive(std::uint64_t id) {
  auto queued = pending_.find(id);
  while (queued == pending_.end() || queued->second.empty()) {
    std::vector<zmq::message_t> frames;
    if (!zmq::recv_multipart(socket_, std::back_inserter(frames), zmq::recv_flags::dontwait)) {
      return std::optional<Received>();
    }
    if (frames.size() < 2) continue;
    auto header = decode_header(frames[0].to_string_view());
    if (!header) return Status(ErrorCode::internal, "agent sent a malformed header: " + header.status().message());
    auto body = decode_body(frames[1].to_string_view(), SIZE_MAX);
    if (!body) return Status(ErrorCode::internal, "agent sent a malformed body: " + body.status().message());
    Received received{header->kind, header->credit, std::move(*body), {}};
    for (std::size_t i = 2; i < frames.size(); ++i) received.attachments.push_back(std::move(frames[i]));
    if (header->id == id) return std::optional<Received>(std::move(received));
    pending_[header->id].push_back(std::move(received));
    queued = pending_.find(id);
  }
  Received next = std::move(queued->second.front());
  queued->second.pop_front();
  if (queued->second.empty()) pending_.erase(queued);
  return std::optional<Received>(std::move(next));
}

Status Client::start(const std::string& method, const nlohmann::json& params, const CallOptions& options,
                     std::uint64_t id) {
  Header header;
  header.id = id;
  header.kind = Kind::call;
  header.method = method;
  header.timeout_ms = options.timeout_ms;
  header.credit = options.window;
  std::vector<zmq::message_t> attachments;
  if (options.attachments) attachments = std::move(*options.attachments);
  return send_message(header, params.is_null() ? nlohmann::json::object() : params, std::move(attachments));
}

Result<nlohmann::json> Client::call(const std::string& method, const nlohmann::json& params, CallOptions options) {
  auto opened = stream(method, params, std::move(options));
  if (!opened) return opened.status();
  Stream& call = **opened;
  while (!call.ended()) {
    auto next = call.next();
    if (!next) return next.status();
  }
  return call.result();
}

Result<std::unique_ptr<Stream>> Client::stream(const std::string& method, const nlohmann::json& params,
                                               CallOptions options) {
  std::uint64_t id = next_id();
  Status sent = start(method, params, options, id);
  if (!sent) return sent;
  std::uint64_t window = options.window ? options.window : kDefaultWindow;
  return std::unique_ptr<Stream>(new Stream(*this, id, window, options.credit_batch, effective_wait(options)));
}

}  // namespace gpubox::rpc
