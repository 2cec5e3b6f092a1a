#include "kernel/kernel_server.h"

#include "kernel/iopub_wire.h"

#include <sys/signalfd.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <vector>

#include "xeus/xeus_context.hpp"
#include "xeus/xzmq_serializer.hpp"

namespace gpubox::kernel {
namespace {

using namespace std::chrono_literals;

constexpr auto kPollPeriod = 100ms;           // how often loops look at the stop flag
constexpr int kIopubHighWaterMark = 100000;   // messages per subscriber before publishing waits
constexpr auto kIopubStallLimit = 120s;       // a subscriber that reads nothing this long loses messages

std::string endpoint(const xeus::xconfiguration& config, const std::string& port) {
  std::string separator = config.m_transport == "ipc" ? "-" : ":";
  return config.m_transport + "://" + config.m_ip + separator + port;
}

// Binds socket to the configured port; port "0" or "" picks a free one and records it.
void bind_socket(zmq::socket_t& socket, const xeus::xconfiguration& config, std::string& port) {
  if (port.empty() || port == "0") {
    socket.bind(config.m_transport + "://" + config.m_ip + ":*");
    std::string last = socket.get(zmq::sockopt::last_endpoint);
    port = last.substr(last.rfind(':') + 1);
  } else {
    socket.bind(endpoint(config, port));
  }
}

}  // namespace

class KernelServer::Messenger : public xeus::xcontrol_messenger {
 public:
  explicit Messenger(KernelServer& server) : server_(server) {}

 private:
  nl::json send_to_shell_impl(const nl::json& message) override { return server_.notify_internal_listener(message); }
  KernelServer& server_;
};

KernelServer::KernelServer(zmq::context_t& context, const xeus::xconfiguration& config, nl::json::error_handler_t eh)
    : config_(config),
      error_handler_(eh),
      auth_(xeus::make_xauthentication(config.m_signature_scheme, config.m_key)),
      shell_(context, zmq::socket_type::router),
      stdin_(context, zmq::socket_type::router),
      control_(context, zmq::socket_type::router),
      heartbeat_(context, zmq::socket_type::rep),
      iopub_(context, zmq::socket_type::xpub),
      messenger_(std::make_unique<Messenger>(*this)) {
  for (zmq::socket_t* socket : {&shell_, &stdin_, &control_, &heartbeat_, &iopub_}) {
    socket->set(zmq::sockopt::linger, 1000);
  }
  // A frontend that connects again with the routing id of a connection the
  // ROUTER has not dropped yet (jupyter_client's id is its session; a DEALER
  // reconnects with its id) takes that id over. Without this, libzmq ignores
  // the new connection and never reads its requests: that frontend waits forever.
  for (zmq::socket_t* socket : {&shell_, &stdin_, &control_}) {
    socket->set(zmq::sockopt::router_handover, true);
  }
  iopub_.set(zmq::sockopt::sndhwm, kIopubHighWaterMark);
  iopub_.set(zmq::sockopt::xpub_nodrop, 1);
  bind_socket(shell_, config_, config_.m_shell_port);
  bind_socket(stdin_, config_, config_.m_stdin_port);
  bind_socket(control_, config_, config_.m_control_port);
  bind_socket(heartbeat_, config_, config_.m_hb_port);
  bind_socket(iopub_, config_, config_.m_iopub_port);
}

KernelServer::~KernelServer() {
  stopping_ = true;
  if (control_thread_.joinable()) control_thread_.join();
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
}

xeus::xcontrol_messenger& KernelServer::get_control_messenger_impl() { return *messenger_; }

void KernelServer::send_shell_impl(xeus::xmessage message) {
  auto wire = xeus::xzmq_serializer::serialize(std::move(message), *auth_, error_handler_);
  wire.send(shell_);
}

void KernelServer::send_control_impl(xeus::xmessage message) {
  auto wire = xeus::xzmq_serializer::serialize(std::move(message), *auth_, error_handler_);
  wire.send(control_);
}

// Sends input_request and waits for the frontend's input_reply, which goes to
// the stdin listener; an interrupt or a stop ends the wait without a reply.
void KernelServer::send_stdin_impl(xeus::xmessage message) {
  cancel_input_ = false;
  // xeus 2.4.1 names the flag "pwd"; the protocol (and jupyter_client) say "password".
  if (message.content().contains("pwd") && !message.content().contains("password")) {
    nl::json content = message.content();
    content["password"] = content["pwd"];
    message = xeus::xmessage(message.identities(), message.header(), message.parent_header(), message.metadata(),
                             std::move(content), xeus::buffer_sequence(message.buffers()));
  }
  auto wire = xeus::xzmq_serializer::serialize(std::move(message), *auth_, error_handler_);
  wire.send(stdin_);
  while (!stopping_ && !cancel_input_) {
    zmq::pollitem_t item{static_cast<void*>(stdin_), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, kPollPeriod);
    if (!(item.revents & ZMQ_POLLIN)) continue;
    zmq::multipart_t reply;
    if (!reply.recv(stdin_)) continue;
    try {
      notify_stdin_listener(xeus::xzmq_serializer::deserialize(reply, *auth_));
      return;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "gpubox kernel: dropped a bad stdin message: %s\n", e.what());
    }
  }
}

void KernelServer::publish_impl(xeus::xpub_message message, xeus::channel) {
  auto wire = serialize_iopub(std::move(message), *auth_, error_handler_);
  std::lock_guard lock(iopub_mutex_);
  // Subscriptions arrive as messages on the XPUB socket: read them so they do not pile up.
  zmq::message_t subscription;
  while (iopub_.recv(subscription, zmq::recv_flags::dontwait)) {
  }
  std::vector<zmq::message_t> parts;
  parts.reserve(wire.size());
  while (!wire.empty()) parts.push_back(wire.pop());
  auto stalled_since = std::chrono::steady_clock::now();
  while (true) {
    // ZMQ_XPUB_NODROP refuses a message at its first part, before anything of it is
    // queued, and a refused part stays intact: retried as is, no copy kept aside.
    if (iopub_.send(parts[0], parts.size() > 1 ? zmq::send_flags::dontwait | zmq::send_flags::sndmore
                                               : zmq::send_flags::dontwait)) {
      for (size_t i = 1; i < parts.size(); ++i) {
        iopub_.send(parts[i], i + 1 < parts.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
      }
      return;
    }
    // A subscriber's queue is full (ZMQ_XPUB_NODROP): wait for it to read.
    zmq::pollitem_t item{static_cast<void*>(iopub_), 0, ZMQ_POLLOUT, 0};
    zmq::poll(&item, 1, kPollPeriod);
    while (iopub_.recv(subscription, zmq::recv_flags::dontwait)) {
    }
    if (std::chrono::steady_clock::now() - stalled_since > kIopubStallLimit || stopping_) {
      std::fprintf(stderr, "gpubox kernel: an iopub subscriber read nothing for %llds; message dropped\n",
                   static_cast<long long>(kIopubStallLimit.count()));
      return;
    }
  }
}

void KernelServer::start_impl(xeus::xpub_message message) {
  publish_impl(std::move(message), xeus::channel::SHELL);
  control_thread_ = std::thread([this] { control_loop(); });
  heartbeat_thread_ = std::thread([this] { heartbeat_loop(); });
  while (!stopping_) {
    zmq::pollitem_t item{static_cast<void*>(shell_), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, kPollPeriod);
    if (!(item.revents & ZMQ_POLLIN)) continue;
    zmq::multipart_t wire;
    if (!wire.recv(shell_)) continue;
    try {
      xeus::xmessage message = xeus::xzmq_serializer::deserialize(wire, *auth_);
      if (shell_hook_ && shell_hook_(message)) continue;
      notify_shell_listener(std::move(message));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "gpubox kernel: dropped a shell message: %s\n", e.what());
    }
  }
  control_thread_.join();
  heartbeat_thread_.join();
}

void KernelServer::interrupt() {
  cancel_input_ = true;
  if (interrupt_hook_) interrupt_hook_();
}

void KernelServer::control_loop() {
  while (!stopping_) {
    zmq::pollitem_t items[2] = {{static_cast<void*>(control_), 0, ZMQ_POLLIN, 0}, {nullptr, signal_fd_, ZMQ_POLLIN, 0}};
    zmq::poll(items, signal_fd_ >= 0 ? 2 : 1, kPollPeriod);
    if (signal_fd_ >= 0 && (items[1].revents & ZMQ_POLLIN)) handle_signals();
    if (!(items[0].revents & ZMQ_POLLIN)) continue;
    zmq::multipart_t wire;
    if (!wire.recv(control_)) continue;
    try {
      xeus::xmessage message = xeus::xzmq_serializer::deserialize(wire, *auth_);
      // xeus 2.4.1 only replies to interrupt_request: the interrupt itself is ours.
      if (message.header().value("msg_type", "") == "interrupt_request") interrupt();
      notify_control_listener(std::move(message));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "gpubox kernel: dropped a control message: %s\n", e.what());
    }
  }
}

void KernelServer::handle_signals() {
  signalfd_siginfo info;
  while (::read(signal_fd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
    if (info.ssi_signo == SIGINT) {
      interrupt();
    } else if (info.ssi_signo == SIGTERM || info.ssi_signo == SIGHUP || info.ssi_signo == SIGQUIT) {
      if (interrupt_hook_) interrupt_hook_();
      stop();
    }
  }
}

void KernelServer::heartbeat_loop() {
  while (!stopping_) {
    zmq::pollitem_t item{static_cast<void*>(heartbeat_), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, kPollPeriod);
    if (!(item.revents & ZMQ_POLLIN)) continue;
    zmq::message_t ping;
    if (heartbeat_.recv(ping, zmq::recv_flags::dontwait)) heartbeat_.send(ping, zmq::send_flags::none);
  }
}

void KernelServer::abort_queue_impl(const listener& l, long polling_interval) {
  while (true) {
    zmq::pollitem_t item{static_cast<void*>(shell_), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(polling_interval));
    if (!(item.revents & ZMQ_POLLIN)) return;
    zmq::multipart_t wire;
    if (!wire.recv(shell_)) return;
    try {
      xeus::xmessage message = xeus::xzmq_serializer::deserialize(wire, *auth_);
      if (shell_hook_ && shell_hook_(message)) continue;  // a comm message is served, not aborted
      l(std::move(message));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "gpubox kernel: dropped a shell message: %s\n", e.what());
    }
  }
}

void KernelServer::stop_impl() { stopping_ = true; }

void KernelServer::update_config_impl(xeus::xconfiguration& config) const {
  config.m_shell_port = config_.m_shell_port;
  config.m_stdin_port = config_.m_stdin_port;
  config.m_control_port = config_.m_control_port;
  config.m_hb_port = config_.m_hb_port;
  config.m_iopub_port = config_.m_iopub_port;
}

std::unique_ptr<xeus::xserver> make_kernel_server(xeus::xcontext& context, const xeus::xconfiguration& config,
                                                  nl::json::error_handler_t eh) {
  return std::make_unique<KernelServer>(context.get_wrapped_context<zmq::context_t>(), config, eh);
}

}  // namespace gpubox::kernel
