#include "host/attach/attach_relay.h"

#include <poll.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <deque>
#include <map>
#include <optional>
#include <zmq_addon.hpp>

#include "host/attach/jupyter_wire.h"
#include "rpc/params.h"
#include "rpc/client.h"

namespace gpubox::host {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr std::uint64_t kWindow = 64;           // DATA from the agent credited ahead
// iopub held for a local frontend that reads it slowly; past this, stream output is dropped.
constexpr std::size_t kIopubBacklogBytes = 64 << 20;
constexpr std::size_t kMaxPeers = 64;           // the agent's limit per relay; the least recently used is closed
constexpr std::size_t kMaxAttachments = 64;     // the agent's limit on frames after the body
constexpr std::int64_t kMaxFrameBytes = 64 << 20; // the agent's max_message_bytes: larger frames are refused locally
constexpr auto kAliveCheck = 1s;
constexpr auto kHelloTimeout = 30s;
constexpr auto kSilenceLimit = 30s;  // the agent speaks at least every 5 s (its keepalive)

enum Channel { kShell = 0, kControl = 1, kStdin = 2 };
constexpr const char* kChannelNames[] = {"shell", "control", "stdin"};

std::string bytes_of(const json& value) {
  if (value.is_binary()) return std::string(value.get_binary().begin(), value.get_binary().end());
  if (value.is_string()) return value.get<std::string>();
  return "";
}

std::string iso_now() {
  auto now = std::chrono::system_clock::now();
  std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  auto micros = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() % 1000000;
  std::tm utc{};
  ::gmtime_r(&seconds, &utc);
  char text[64];
  std::snprintf(text, sizeof text, "%04d-%02d-%02dT%02d:%02d:%02d.%06lldZ", utc.tm_year + 1900, utc.tm_mon + 1,
                utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, static_cast<long long>(micros));
  return text;
}

void warn(const std::string& message) { std::fprintf(stderr, "gpubox attach: %s\n", message.c_str()); }

}  // namespace

struct AttachRelay::Impl {
  zmq::context_t context{1};
  zmq::socket_t sockets[3] = {zmq::socket_t(context, zmq::socket_type::router),
                              zmq::socket_t(context, zmq::socket_type::router),
                              zmq::socket_t(context, zmq::socket_type::router)};
  zmq::socket_t iopub{context, zmq::socket_type::xpub};
  zmq::socket_t heartbeat{context, zmq::socket_type::router};
  HmacSigner local{""};

  // A frontend, known by its routing identity (the frames before the delimiter).
  struct Peer {
    std::uint32_t id = 0;
    std::vector<std::string> identity;
    std::uint64_t last_used = 0;
  };
  std::map<std::string, Peer> peers;            // by identity
  std::map<std::uint32_t, std::string> by_id;   // peer id → identity key
  std::uint32_t next_peer = 1;
  std::uint64_t uses = 0;

  // State of one run.
  struct Out {
    json body;
    std::vector<zmq::message_t> frames;
  };
  std::unique_ptr<rpc::Stream> relay;                     // kernel.relay
  std::deque<Out> outbox;                                 // waits for the agent's credit
  std::deque<std::vector<zmq::message_t>> iopub_backlog;  // waits for the local XPUB to take it
  std::size_t backlog_bytes = 0;
  std::uint64_t dropped_streams = 0, dropped_bytes = 0;   // since the backlog last cleared
  std::optional<HmacSigner> kernel;                       // after the agent's hello
  std::string session;
  // A shutdown_request being answered: where the reply goes, and its parent header.
  struct Shutdown {
    int channel;
    std::vector<std::string> identity;
    std::string parent;
    bool restart;
  };
  std::optional<Shutdown> shutdown;
  bool shutdown_done = false;
  std::function<Status()> on_ready;
  Clock::time_point last_heard = Clock::now();

  Status flush_outbox() {
    while (!outbox.empty() && relay->send_credit() > 0) {
      Out next = std::move(outbox.front());
      outbox.pop_front();
      if (Status sent = relay->send(next.body, std::move(next.frames)); !sent) return sent;
    }
    return Status::ok();
  }

  std::string peer_key(const std::vector<zmq::message_t>& frames, std::size_t delimiter) {
    std::string key;
    for (std::size_t i = 0; i < delimiter; ++i) {
      key += std::to_string(frames[i].size()) + ":";
      key.append(frames[i].to_string_view());
    }
    return key;
  }

  Peer& peer_for(const std::vector<zmq::message_t>& frames, std::size_t delimiter) {
    std::string key = peer_key(frames, delimiter);
    auto found = peers.find(key);
    if (found == peers.end()) {
      if (peers.size() >= kMaxPeers) {
        auto oldest = peers.begin();
        for (auto it = peers.begin(); it != peers.end(); ++it) {
          if (it->second.last_used < oldest->second.last_used) oldest = it;
        }
        outbox.push_back({{{"close", oldest->second.id}}, {}});
        by_id.erase(oldest->second.id);
        peers.erase(oldest);
      }
      Peer peer;
      peer.id = next_peer++;
      for (std::size_t i = 0; i < delimiter; ++i) peer.identity.push_back(frames[i].to_string());
      by_id[peer.id] = key;
      found = peers.emplace(key, std::move(peer)).first;
    }
    found->second.last_used = ++uses;
    return found->second;
  }

  // One message from a local frontend on channel.
  void from_frontend(int channel, std::vector<zmq::message_t> frames) {
    auto delimiter = locate_delimiter(frames);
    if (!delimiter) return warn("dropped a message on " + std::string(kChannelNames[channel]) + ": " + delimiter.status().message());
    std::size_t d = *delimiter;
    if (!local.verify(frames[d + 1].to_string_view(), &frames[d + 2])) {
      return warn("dropped a message on " + std::string(kChannelNames[channel]) +
                  " whose signature does not match the connection file's key");
    }
    if (frames.size() - d - 1 > kMaxAttachments) {
      return warn("dropped a message with more than " + std::to_string(kMaxAttachments - 5) + " buffers");
    }
    std::string type = header_msg_type(frames[d + 2].to_string_view());
    if (type.empty()) return warn("dropped a message whose header has no msg_type");
    Peer& peer = peer_for(frames, d);
    if (type == "shutdown_request") {
      json content = json::parse(frames[d + 5].to_string_view(), nullptr, false);
      bool restart = content.is_object() && content.value("restart", false) == true;
      shutdown = Shutdown{channel, peer.identity, frames[d + 2].to_string(), restart};
      if (restart) outbox.push_back({{{"restart", true}}, {}});
      return;
    }
    frames[d + 1] = zmq::message_t(kernel->sign(&frames[d + 2]));
    std::vector<zmq::message_t> parts;
    for (std::size_t i = d + 1; i < frames.size(); ++i) parts.push_back(std::move(frames[i]));
    outbox.push_back({{{"ch", kChannelNames[channel]}, {"peer", peer.id}}, std::move(parts)});
  }

  // Sends the shutdown_reply the pending shutdown_request waits for.
  void answer_shutdown() {
    json header = {{"msg_id", session + "-shutdown"}, {"session", session}, {"username", "gpubox"},
                   {"date", iso_now()},               {"msg_type", "shutdown_reply"}, {"version", "5.3"}};
    json content = {{"status", "ok"}, {"restart", shutdown->restart}};
    std::vector<zmq::message_t> frames;
    for (const auto& id_frame : shutdown->identity) frames.emplace_back(id_frame.data(), id_frame.size());
    frames.emplace_back(kJupyterDelimiter.data(), kJupyterDelimiter.size());
    frames.emplace_back();  // signature, below
    std::string parts[4] = {header.dump(), shutdown->parent, "{}", content.dump()};
    for (const auto& part : parts) frames.emplace_back(part.data(), part.size());
    std::size_t d = shutdown->identity.size();
    frames[d + 1] = zmq::message_t(local.sign(&frames[d + 2]));
    (void)zmq::send_multipart(sockets[shutdown->channel], frames, zmq::send_flags::dontwait);
    shutdown_done = true;
  }

  // One DATA message from the agent.
  Status from_agent(rpc::Incoming& got) {
    const json& body = got.body;
    if (auto hello = body.find("kernel"); hello != body.end() && hello->is_object()) {
      if (on_ready) {
        if (Status ready = on_ready(); !ready) return ready;
      }
      kernel.emplace(hello->value("key", std::string()));
      return Status::ok();
    }
    if (body.contains("restarted")) {
      if (shutdown) answer_shutdown();
      return Status::ok();
    }
    auto channel = body.find("ch");
    if (channel == body.end() || !channel->is_string()) return Status::ok();
    auto& frames = got.attachments;
    if (frames.size() < kJupyterParts) return Status::ok();
    frames[0] = zmq::message_t(local.sign(&frames[1]));
    std::vector<zmq::message_t> message;
    std::string name = channel->get<std::string>();
    int target = -1;
    if (name == "iopub") {
      if (auto topic = body.find("topic"); topic != body.end() && topic->is_array()) {
        for (const auto& part : *topic) {
          std::string bytes = bytes_of(part);
          message.emplace_back(bytes.data(), bytes.size());
        }
      }
    } else {
      for (int c : {kShell, kControl, kStdin}) {
        if (name == kChannelNames[c]) target = c;
      }
      auto peer_field = body.find("peer");
      if (target < 0 || peer_field == body.end() || !peer_field->is_number_unsigned()) return Status::ok();
      auto peer = by_id.find(peer_field->get<std::uint32_t>());
      if (peer == by_id.end()) return Status::ok();  // that frontend was closed meanwhile
      for (const auto& id_frame : peers[peer->second].identity) message.emplace_back(id_frame.data(), id_frame.size());
    }
    bool stream = target < 0 && header_msg_type(frames[1].to_string_view()) == "stream";
    message.emplace_back(kJupyterDelimiter.data(), kJupyterDelimiter.size());
    for (auto& frame : frames) message.push_back(std::move(frame));
    if (target >= 0) {
      // A frontend that went away (or reads too slowly) loses its replies, as with any kernel.
      (void)zmq::send_multipart(sockets[target], message, zmq::send_flags::dontwait);
    } else if (!iopub_backlog.empty() || !zmq::send_multipart(iopub, message, zmq::send_flags::dontwait)) {
      hold_iopub(std::move(message), stream);
    }
    return Status::ok();
  }

  // Holds an iopub message until the local XPUB takes it. The agent is never
  // held back for iopub, so the replies behind the output reach a frontend that
  // waits for its execute_reply before it reads iopub. Past kIopubBacklogBytes
  // stream output is dropped, as a kernel's PUB socket drops at its high-water
  // mark; statuses, results and displays are always kept.
  void hold_iopub(std::vector<zmq::message_t> message, bool stream) {
    std::size_t bytes = 0;
    for (const auto& frame : message) bytes += frame.size();
    if (stream && backlog_bytes + bytes > kIopubBacklogBytes) {
      ++dropped_streams;
      dropped_bytes += bytes;
      return;
    }
    backlog_bytes += bytes;
    iopub_backlog.push_back(std::move(message));
  }

  // Takes what the agent sent: at most a window's worth, so that a kernel
  // writing without pause still lets the frontends' sockets be served.
  Result<std::optional<Ending>> drain_agent() {
    for (std::uint64_t taken = 0; taken < kWindow; ++taken) {
      auto got = relay->try_next();
      if (!got) return got.status();
      if (!got->has_value()) break;
      last_heard = Clock::now();
      if (Status handled = from_agent(**got); !handled) return handled;
      if (shutdown_done) return std::optional<Ending>(Ending::shutdown);
    }
    if (relay->ended()) {
      if (!relay->result()) return relay->result().status();
      return Status(ErrorCode::unavailable, "the agent ended the kernel relay (is the sandbox shutting down?)");
    }
    return std::optional<Ending>();
  }

  void flush_iopub() {
    while (!iopub_backlog.empty()) {
      if (!zmq::send_multipart(iopub, iopub_backlog.front(), zmq::send_flags::dontwait)) return;
      for (const auto& frame : iopub_backlog.front()) backlog_bytes -= frame.size();
      iopub_backlog.pop_front();
    }
    if (dropped_streams > 0) {
      warn("a frontend read iopub too slowly: " + std::to_string(dropped_streams) + " stream messages (" +
           std::to_string(dropped_bytes >> 20) + " MiB of output) were dropped");
      dropped_streams = dropped_bytes = 0;
    }
  }

  Result<Ending> serve(rpc::Client& client, int stop_fd, const std::function<bool()>& agent_alive) {
    auto opened = client.stream("kernel.relay", json::object(), {.window = kWindow});
    if (!opened) return opened.status();
    relay = std::move(*opened);
    auto random = random_hex_key();
    session = random ? random->substr(0, 32) : "gpubox-attach";
    auto started = Clock::now();
    auto next_check = started + kAliveCheck;
    while (true) {
      auto drained = drain_agent();
      if (!drained) return drained.status();
      if (drained->has_value()) return **drained;
      if (shutdown && !shutdown->restart && !shutdown_done) {
        answer_shutdown();
        return Ending::shutdown;
      }
      if (Status flushed = flush_outbox(); !flushed) return flushed;
      if (!kernel && Clock::now() - started > kHelloTimeout) {
        return Status(ErrorCode::unavailable, "the agent did not open the kernel relay within 30 s");
      }
      // Frontends are read only when their message can go on at once.
      bool take_local = kernel && outbox.empty() && relay->send_credit() > 0 && !shutdown;
      zmq::pollitem_t items[] = {
          relay->poll_item(),
          {nullptr, stop_fd, ZMQ_POLLIN, 0},
          {iopub.handle(), 0, static_cast<short>(ZMQ_POLLIN | (iopub_backlog.empty() ? 0 : ZMQ_POLLOUT)), 0},
          {heartbeat.handle(), 0, ZMQ_POLLIN, 0},
          {sockets[kShell].handle(), 0, static_cast<short>(take_local ? ZMQ_POLLIN : 0), 0},
          {sockets[kControl].handle(), 0, static_cast<short>(take_local ? ZMQ_POLLIN : 0), 0},
          {sockets[kStdin].handle(), 0, static_cast<short>(take_local ? ZMQ_POLLIN : 0), 0},
      };
      zmq::poll(items, std::size(items), 250ms);
      if (items[1].revents & ZMQ_POLLIN) return Ending::stopped;
      if (items[2].revents & ZMQ_POLLIN) {  // subscriptions: nothing to do
        zmq::message_t ignored;
        while (iopub.recv(ignored, zmq::recv_flags::dontwait)) {
        }
      }
      if (items[2].revents & ZMQ_POLLOUT) flush_iopub();
      if (items[3].revents & ZMQ_POLLIN) {  // heartbeat: echo while the relay is up
        std::vector<zmq::message_t> ping;
        while (zmq::recv_multipart(heartbeat, std::back_inserter(ping), zmq::recv_flags::dontwait)) {
          (void)zmq::send_multipart(heartbeat, ping, zmq::send_flags::dontwait);
          ping.clear();
        }
      }
      for (int channel : {kControl, kShell, kStdin}) {
        if (!(items[4 + channel].revents & ZMQ_POLLIN) || shutdown) continue;
        std::vector<zmq::message_t> frames;
        if (zmq::recv_multipart(sockets[channel], std::back_inserter(frames), zmq::recv_flags::dontwait)) {
          from_frontend(channel, std::move(frames));
        }
      }
      if (Clock::now() >= next_check) {
        next_check = Clock::now() + kAliveCheck;
        if (agent_alive && !agent_alive()) return Status(ErrorCode::unavailable, "the sandbox's agent ended");
        // Silence counts only while the agent is free to speak: not while its executor restarts.
        if (shutdown && shutdown->restart) last_heard = Clock::now();
        if (kernel && Clock::now() - last_heard > kSilenceLimit) {
          return Status(ErrorCode::unavailable, "the agent sent nothing for 30 s (it keeps the relay alive every 5 s)");
        }
      }
    }
  }
};

AttachRelay::AttachRelay(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
AttachRelay::~AttachRelay() = default;

Result<std::unique_ptr<AttachRelay>> AttachRelay::bind(ConnectionInfo local) {
  auto impl = std::make_unique<Impl>();
  impl->local = HmacSigner(local.key);
  std::string ip = local.ip == "localhost" ? "127.0.0.1" : local.ip;
  std::pair<zmq::socket_t*, int*> layout[] = {{&impl->sockets[kShell], &local.shell_port},
                                              {&impl->sockets[kControl], &local.control_port},
                                              {&impl->sockets[kStdin], &local.stdin_port},
                                              {&impl->iopub, &local.iopub_port},
                                              {&impl->heartbeat, &local.hb_port}};
  for (auto [socket, port] : layout) {
    socket->set(zmq::sockopt::linger, 1000);  // a shutdown_reply still goes out as we exit
    socket->set(zmq::sockopt::maxmsgsize, kMaxFrameBytes);
    std::string endpoint = "tcp://" + ip + ":" + (*port == 0 ? std::string("*") : std::to_string(*port));
    try {
      socket->bind(endpoint);
    } catch (const zmq::error_t& e) {
      return Status(e.num() == EADDRINUSE ? ErrorCode::already_exists : ErrorCode::invalid_request,
                    "cannot listen on " + endpoint + ": " + e.what());
    }
    std::string bound = socket->get(zmq::sockopt::last_endpoint);
    *port = std::stoi(bound.substr(bound.rfind(':') + 1));
  }
  impl->iopub.set(zmq::sockopt::xpub_nodrop, 1);
  // A frontend that reconnects with its routing id (jupyter_client's is its
  // session) before the old connection is dropped takes the id over; without
  // this libzmq ignores the new connection and never reads its requests.
  for (zmq::socket_t& router : impl->sockets) router.set(zmq::sockopt::router_handover, true);
  impl->heartbeat.set(zmq::sockopt::router_handover, true);
  std::unique_ptr<AttachRelay> relay(new AttachRelay(std::move(impl)));
  relay->local_ = std::move(local);
  return relay;
}

bool AttachRelay::ready() const { return impl_->kernel.has_value(); }

Result<AttachRelay::Ending> AttachRelay::run(rpc::Client& client, int stop_fd, const std::function<bool()>& agent_alive,
                                             const std::function<Status()>& on_ready) {
  impl_->on_ready = on_ready;
  Result<Ending> ended = Status(ErrorCode::internal, "relay: not run");
  try {
    ended = impl_->serve(client, stop_fd, agent_alive);
  } catch (const zmq::error_t& e) {
    ended = Status(ErrorCode::internal, std::string("relay: ") + e.what());
  }
  impl_->relay.reset();  // before the caller's client goes
  return ended;
}

}  // namespace gpubox::host
