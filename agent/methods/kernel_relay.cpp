// kernel.relay (rpc/PROTOCOL.md, "Kernel relay"): the agent's half of
// `gpubox attach`. Jupyter frontends on the host reach the kernel's sockets,
// which bind to 127.0.0.1 inside the sandbox, through this one RPC stream.
#include <atomic>
#include <deque>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <zmq_addon.hpp>

#include "agent/log.h"
#include "agent/methods/methods.h"
#include "agent/methods/relay_frames.h"
#include "kernel/agent_kernel.h"
#include "rpc/inbound_stream.h"
#include "rpc/params.h"

namespace gpubox {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

constexpr std::uint64_t kInputWindow = 32;  // host DATA the agent accepts ahead
constexpr std::size_t kMaxPeers = 64;       // frontends one relay serves at once
constexpr std::size_t kDrainBatch = 64;     // messages taken from one socket per turn
constexpr std::string_view kDelimiter = "<IDS|MSG>";
constexpr auto kKeepalive = 5s;             // silence after which the agent says it is still there

// The kernel's HMAC key, read from its connection file (written 0600 by the kernel).
Result<std::string> read_kernel_key(const std::string& connection_file) {
  std::ifstream in(connection_file);
  std::stringstream text;
  text << in.rdbuf();
  json file = json::parse(text.str(), nullptr, false);
  if (!in || !file.is_object() || !file.contains("key") || !file["key"].is_string()) {
    return Status(ErrorCode::unavailable, "kernel.relay: cannot read the kernel's key from '" + connection_file + "'");
  }
  return file["key"].get<std::string>();
}

// One relay session: a SUB on the kernel's iopub and, per frontend ("peer"),
// a DEALER on each of shell, control and stdin that share one routing id, so
// the kernel's input_request on stdin reaches the frontend whose execute asked.
// Runs on the call's worker thread, which owns every socket here.
class KernelRelay {
 public:
  KernelRelay(rpc::CallContext& call, kernel::AgentKernel& kernel)
      : call_(call), kernel_(kernel), context_(1), iopub_(context_, zmq::socket_type::sub) {
    static std::atomic<std::uint64_t> sessions{0};
    session_ = ++sessions;
    endpoints_ = kernel.endpoints();
    iopub_.set(zmq::sockopt::linger, 0);
    iopub_.set(zmq::sockopt::subscribe, "");
  }

  // Connects the iopub SUB and waits (up to a second) for its handshake, after
  // which its subscription is on the wire: output the kernel publishes for the
  // host's first request is not lost to a subscription still in flight.
  void subscribe_iopub() {
    static std::atomic<std::uint64_t> monitors{0};
    std::string address_of_monitor = "inproc://gpubox-relay-monitor-" + std::to_string(++monitors);
    bool monitored = zmq_socket_monitor(iopub_.handle(), address_of_monitor.c_str(), ZMQ_EVENT_HANDSHAKE_SUCCEEDED) == 0;
    std::optional<zmq::socket_t> events;
    if (monitored) {
      events.emplace(context_, zmq::socket_type::pair);
      events->set(zmq::sockopt::linger, 0);
      events->connect(address_of_monitor);
    }
    iopub_.connect(address("iopub_port"));
    if (events) {
      zmq::pollitem_t item{events->handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, 1000ms);
      zmq_socket_monitor(iopub_.handle(), nullptr, 0);
    }
  }

  Status run(const std::string& key) {
    subscribe_iopub();
    json hello = {{"kernel", {{"key", key}, {"signature_scheme", endpoints_.value("signature_scheme", "hmac-sha256")}}}};
    if (Status sent = send(hello); !sent) return sent;
    input_.emplace(call_, rpc::InboundOptions{.window = kInputWindow});
    while (true) {
      std::vector<zmq::pollitem_t> items;
      items.push_back({nullptr, call_.stop_fd(), ZMQ_POLLIN, 0});
      items.push_back({nullptr, input_->poll_fd(), static_cast<short>(held_ ? 0 : ZMQ_POLLIN), 0});
      items.push_back({iopub_.handle(), 0, ZMQ_POLLIN, 0});
      items.push_back({held_ ? held_->socket->handle() : nullptr, -1, static_cast<short>(held_ ? ZMQ_POLLOUT : 0), 0});
      std::vector<std::pair<std::uint32_t, RelayChannel>> owners;
      for (auto& [peer, sockets] : peers_) {
        for (RelayChannel channel : {RelayChannel::shell, RelayChannel::control, RelayChannel::stdin_channel}) {
          items.push_back({sockets.of(channel).handle(), 0, ZMQ_POLLIN, 0});
          owners.emplace_back(peer, channel);
        }
      }
      zmq::poll(items.data(), items.size(), 1000ms);
      if (Status stopped = call_.stop_reason(); !stopped) return stopped;
      if (items[2].revents & ZMQ_POLLIN) {
        if (Status relayed = relay_iopub(); !relayed) return relayed;
      }
      for (std::size_t i = 0; i < owners.size(); ++i) {
        if (!(items[4 + i].revents & ZMQ_POLLIN)) continue;
        if (Status relayed = relay_reply(owners[i].first, owners[i].second); !relayed) return relayed;
      }
      if (held_ && (items[3].revents & ZMQ_POLLOUT)) {
        if (!send_held()) continue;
      }
      if (!held_) {
        if (Status taken = take_input(); !taken) return taken;
      }
      if (rpc::Clock::now() - last_sent_ >= kKeepalive) {
        if (Status sent = send({{"alive", true}}); !sent) return sent;
      }
    }
  }

 private:
  struct PeerSockets {
    zmq::socket_t shell, control, stdin_socket;
    zmq::socket_t& of(RelayChannel channel) {
      return channel == RelayChannel::shell ? shell : channel == RelayChannel::control ? control : stdin_socket;
    }
  };
  // A message the kernel's socket could not take yet (its queue is full):
  // no more host input is taken until it is sent, so the host, and then its
  // frontends, wait instead of anything being dropped.
  struct Held {
    zmq::socket_t* socket;
    std::vector<zmq::message_t> frames;
  };

  Status send(const json& body, std::vector<zmq::message_t> attachments = {}) {
    Status sent = call_.send_data(body, std::move(attachments));
    last_sent_ = rpc::Clock::now();
    return sent;
  }

  std::string address(const char* port) const {
    return "tcp://" + endpoints_.value("ip", std::string("127.0.0.1")) + ":" +
           std::to_string(endpoints_.value(port, 0));
  }

  Result<PeerSockets*> peer_sockets(std::uint32_t peer) {
    auto found = peers_.find(peer);
    if (found != peers_.end()) return &found->second;
    if (peers_.size() >= kMaxPeers) {
      return Status(ErrorCode::resource_exhausted, "kernel.relay: more than " + std::to_string(kMaxPeers) +
                                                       " frontends at once; close one ({\"close\": peer}) first");
    }
    // Unique per opening, not per peer: a peer opened again after {"close"}
    // must not reuse the routing id of its old sockets. A ROUTER that still
    // holds the old connection (it drops it only after its own thread has seen
    // it close) ignores a second one with the same id, and libzmq then never
    // reads that connection's messages: the reopened peer would wait forever.
    std::string routing_id = "gpubox-relay-" + std::to_string(session_) + "-" + std::to_string(peer) + "-" +
                             std::to_string(++openings_);
    PeerSockets sockets{zmq::socket_t(context_, zmq::socket_type::dealer), zmq::socket_t(context_, zmq::socket_type::dealer),
                        zmq::socket_t(context_, zmq::socket_type::dealer)};
    for (auto [channel, port] : {std::pair{RelayChannel::shell, "shell_port"}, std::pair{RelayChannel::control, "control_port"},
                                 std::pair{RelayChannel::stdin_channel, "stdin_port"}}) {
      zmq::socket_t& socket = sockets.of(channel);
      socket.set(zmq::sockopt::linger, 0);
      socket.set(zmq::sockopt::routing_id, routing_id);
      socket.connect(address(port));
    }
    return &peers_.emplace(peer, std::move(sockets)).first->second;
  }

  // Takes the host's DATA until none is queued or one must wait.
  Status take_input() {
    while (!held_) {
      auto next = input_->try_next();
      if (!next) return next.status();
      if (!next->has_value()) return Status::ok();
      auto input = decode_relay_input(**next);
      if (!input) return input.status();
      switch (input->kind) {
        case RelayInput::Kind::close:
          peers_.erase(input->peer);
          break;
        case RelayInput::Kind::restart: {
          kernel_.interrupt();
          if (Status restarted = kernel_.executor().restart(); !restarted) return restarted;
          if (Status sent = send({{"restarted", kernel_.executor().restarts()}}); !sent) return sent;
          break;
        }
        case RelayInput::Kind::message: {
          if (input->msg_type == "shutdown_request") {
            // The sandbox's kernel outlives its frontends: the host answers a
            // shutdown itself; one that reaches the agent is dropped.
            log::warn("kernel.relay: shutdown_request not forwarded", {{"peer", input->peer}});
            break;
          }
          auto sockets = peer_sockets(input->peer);
          if (!sockets) return sockets.status();
          std::vector<zmq::message_t> frames;
          frames.reserve(input->frames.size() + 1);
          frames.emplace_back(kDelimiter.data(), kDelimiter.size());
          for (auto& frame : input->frames) frames.push_back(std::move(frame));
          held_ = Held{&(*sockets)->of(input->channel), std::move(frames)};
          send_held();
          break;
        }
      }
    }
    return Status::ok();
  }

  // True when the held message went out.
  bool send_held() {
    try {
      if (!zmq::send_multipart(*held_->socket, held_->frames, zmq::send_flags::dontwait)) return false;
    } catch (const zmq::error_t& e) {
      log::warn("kernel.relay: a message to the kernel was dropped", {{"error", e.what()}});
    }
    held_.reset();
    return true;
  }

  // Sends the frames after the delimiter to the host; the ones before it go in body[prefix_field].
  Status forward(json body, std::vector<zmq::message_t>& frames, const char* prefix_field) {
    std::size_t delimiter = 0;
    while (delimiter < frames.size() && frames[delimiter].to_string_view() != kDelimiter) ++delimiter;
    if (delimiter == frames.size() || frames.size() - delimiter - 1 < kRelayMinFrames) return Status::ok();  // not Jupyter's
    if (prefix_field) {
      json prefix = json::array();
      for (std::size_t i = 0; i < delimiter; ++i) prefix.push_back(rpc::binary(frames[i].to_string_view()));
      body[prefix_field] = std::move(prefix);
    }
    std::vector<zmq::message_t> parts;
    for (std::size_t i = delimiter + 1; i < frames.size(); ++i) parts.push_back(std::move(frames[i]));
    return send(body, std::move(parts));
  }

  Status relay_iopub() {
    for (std::size_t n = 0; n < kDrainBatch; ++n) {
      std::vector<zmq::message_t> frames;
      if (!zmq::recv_multipart(iopub_, std::back_inserter(frames), zmq::recv_flags::dontwait)) break;
      if (Status sent = forward({{"ch", "iopub"}}, frames, "topic"); !sent) return sent;
    }
    return Status::ok();
  }

  Status relay_reply(std::uint32_t peer, RelayChannel channel) {
    for (std::size_t n = 0; n < kDrainBatch; ++n) {
      auto found = peers_.find(peer);
      if (found == peers_.end()) break;
      std::vector<zmq::message_t> frames;
      if (!zmq::recv_multipart(found->second.of(channel), std::back_inserter(frames), zmq::recv_flags::dontwait)) break;
      if (Status sent = forward({{"ch", relay_channel_name(channel)}, {"peer", peer}}, frames, nullptr); !sent) return sent;
    }
    return Status::ok();
  }

  rpc::CallContext& call_;
  kernel::AgentKernel& kernel_;
  std::uint64_t session_ = 0;
  std::uint64_t openings_ = 0;  // peers' socket sets opened so far
  json endpoints_;
  zmq::context_t context_;
  zmq::socket_t iopub_;
  std::map<std::uint32_t, PeerSockets> peers_;
  std::optional<Held> held_;
  std::optional<rpc::InboundStream> input_;  // the host's DATA, opened once the hello went out
  rpc::Clock::time_point last_sent_ = rpc::Clock::now();
};

}  // namespace

void add_kernel_relay_method(rpc::MethodRegistry& methods, std::function<kernel::AgentKernel*()> get_kernel,
                             std::string connection_file) {
  methods.add("kernel.relay", [get_kernel, connection_file](rpc::CallContext& call) -> Result<json> {
    rpc::ParamReader params(call.params());
    if (Status status = params.finish(); !status) return status;
    kernel::AgentKernel* kernel = get_kernel ? get_kernel() : nullptr;
    if (!kernel) return Status(ErrorCode::unavailable, "the kernel is disabled (config kernel.enabled) or not running");
    auto key = read_kernel_key(connection_file);
    if (!key) return key.status();
    kernel::AgentKernel::Attachment attached(*kernel);  // the idle watchdog waits while a frontend is attached
    try {
      KernelRelay relay(call, *kernel);
      Status ended = relay.run(*key);
      if (!ended) return ended;
    } catch (const zmq::error_t& e) {
      return Status(ErrorCode::internal, std::string("kernel.relay: ") + e.what());
    }
    return json::object();
  });
}

}  // namespace gpubox
