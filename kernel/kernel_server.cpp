#include "kernel/kernel_server.h"

#include "kernel/frame_channel.h"

#include "kernel/iopub_wire.h"

#include <sys/signalfd.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <type_traits>
#include <vector>

#include "xeus/xeus_context.hpp"
#include "xeus/xguid.hpp"
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
      messenger_(std::make_unique<Messenger>(*this)),
      session_(xeus::new_xguid()) {
  for (zmq::socket_t* socket : {&shell_, &stdin_, &control_, &heartbeat_, &iopub_}) {
    socket->set(zmq::sockopt::linger, 1000);
    // A peer's frame header names its size: refuse one past the executor's own frame limit before
    // libzmq allocates it (a stray client's bytes once claimed 10^18, and ASan's malloc aborted PID 1).
    socket->set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(kMaxFrameBytes));
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

template <class Message>
Message KernelServer::with_kernel_count(Message message) const {
  if (!counter_) return message;
  int count = counter_->count_of(message.parent_header().value("msg_id", ""));
  if (count == 0 || !message.content().contains("execution_count")) return message;
  nl::json content = message.content();
  content["execution_count"] = count;
  if constexpr (std::is_same_v<Message, xeus::xpub_message>) {
    return xeus::xpub_message(message.topic(), message.header(), message.parent_header(), message.metadata(),
                              std::move(content), xeus::buffer_sequence(message.buffers()));
  } else {
    return xeus::xmessage(message.identities(), message.header(), message.parent_header(), message.metadata(),
                          std::move(content), xeus::buffer_sequence(message.buffers()));
  }
}

void KernelServer::send_shell_impl(xeus::xmessage message) {
  const std::string msg_type = message.header().value("msg_type", "");
  if (msg_type == "execute_reply") {
    // What arrived before the frontend can have seen this error is what stop_on_error aborts.
    if (message.content().value("status", "") == "error") hold_arrived_requests();
    message = with_kernel_count(std::move(message));
  }
  auto wire = xeus::xzmq_serializer::serialize(std::move(message), *auth_, error_handler_);
  wire.send(shell_);
}

void KernelServer::hold_arrived_requests() {
  while (true) {
    zmq::multipart_t wire;
    if (!wire.recv(shell_, ZMQ_DONTWAIT)) return;
    held_.push_back({std::move(wire), false});
  }
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
  if (message.header().value("msg_type", "") == "execute_input") message = with_kernel_count(std::move(message));
  auto wire = serialize_iopub(std::move(message), *auth_, error_handler_);
  MutexLock lock(iopub_mutex_);
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
    if (!held_.empty()) {
      HeldRequest held = std::move(held_.front());
      held_.pop_front();
      serve_shell(held.wire, held.abort);
      continue;
    }
    zmq::pollitem_t item{static_cast<void*>(shell_), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, kPollPeriod);
    if (!(item.revents & ZMQ_POLLIN)) continue;
    zmq::multipart_t wire;
    if (!wire.recv(shell_)) continue;
    serve_shell(wire, false);
  }
  control_thread_.join();
  heartbeat_thread_.join();
}

void KernelServer::serve_shell(zmq::multipart_t& wire, bool abort) {
  try {
    xeus::xmessage message = xeus::xzmq_serializer::deserialize(wire, *auth_);
    const std::string msg_type = message.header().value("msg_type", "");
    if (abort && msg_type == "execute_request") {
      reply_aborted(message);
      return;
    }
    if (shell_interceptor_ && shell_interceptor_(message)) return;
    if (msg_type != "execute_request") {
      notify_shell_listener(std::move(message));
      return;
    }
    // Counted as xeus counts: visible and stored in history.
    const nl::json& content = message.content();
    if (counter_ && !content.value("silent", false) && content.value("store_history", true)) {
      counter_->assign(message.header().value("msg_id", ""));
    }
    if (signal_fd_ >= 0) handle_signals(true);
    set_running_cell(message.header());
    notify_shell_listener(std::move(message));
    set_running_cell(nl::json());
  } catch (const std::exception& e) {
    set_running_cell(nl::json());
    std::fprintf(stderr, "gpubox kernel: dropped a shell message: %s\n", e.what());
  }
}

void KernelServer::set_running_cell(const nl::json& header) {
  {
    MutexLock lock(running_cell_mutex_);
    running_cell_ = header.is_object() ? nl::json{{"session", header.value("session", "")}, {"date", header.value("date", "")}}
                                       : nl::json();
  }
  if (cell_listener_) cell_listener_(header.is_object());
}

// A frontend that sends interrupt_request just after a cell ended, and then its
// next cell at once, can have the interrupt read here after that next cell
// started (control and shell are two sockets): its date, on the same clock as
// the cell's when both come from one session, tells that it was meant for an
// earlier cell, and it is dropped.
bool KernelServer::sent_before_running_cell(const nl::json& interrupt) {
  MutexLock lock(running_cell_mutex_);
  if (!running_cell_.is_object()) return false;
  std::string session = interrupt.value("session", ""), date = interrupt.value("date", "");
  std::string cell_date = running_cell_.value("date", "");
  return !session.empty() && session == running_cell_.value("session", "") && !date.empty() &&
         date.size() == cell_date.size() && date < cell_date;
}

// As ipykernel answers a request it aborts: busy, {"status": "aborted"}, idle.
void KernelServer::reply_aborted(const xeus::xmessage& request) {
  const nl::json& parent = request.header();
  auto status = [&](const char* state) {
    publish_impl(xeus::xpub_message("kernel.gpubox.status", xeus::make_header("status", "gpubox", session_), parent,
                                    nl::json::object(), {{"execution_state", state}}, xeus::buffer_sequence()),
                 xeus::channel::SHELL);
  };
  status("busy");
  nl::json aborted = {{"status", "aborted"}};
  send_shell_impl(xeus::xmessage(request.identities(), xeus::make_header("execute_reply", "gpubox", session_), parent,
                                 aborted, aborted, xeus::buffer_sequence()));
  status("idle");
}

void KernelServer::interrupt() {
  cancel_input_ = true;
  if (interrupt_handler_) interrupt_handler_();
}

void KernelServer::control_loop() {
  while (!stopping_) {
    zmq::pollitem_t items[2] = {{static_cast<void*>(control_), 0, ZMQ_POLLIN, 0}, {nullptr, signal_fd_, ZMQ_POLLIN, 0}};
    zmq::poll(items, signal_fd_ >= 0 ? 2 : 1, kPollPeriod);
    if (signal_fd_ >= 0 && (items[1].revents & ZMQ_POLLIN)) handle_signals(false);
    if (!(items[0].revents & ZMQ_POLLIN)) continue;
    zmq::multipart_t wire;
    if (!wire.recv(control_)) continue;
    try {
      xeus::xmessage message = xeus::xzmq_serializer::deserialize(wire, *auth_);
      // xeus 2.4.1 only replies to interrupt_request: the interrupt itself is ours.
      if (message.header().value("msg_type", "") == "interrupt_request" && !sent_before_running_cell(message.header())) {
        interrupt();
      }
      notify_control_listener(std::move(message));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "gpubox kernel: dropped a control message: %s\n", e.what());
    }
  }
}

// Both the control thread (as signals come) and the shell thread (before it
// serves a cell) read the signalfd, under signal_mutex_: a SIGINT that was
// pending when a cell came in was sent before it, and is dropped, however
// late the control thread would have woken for it.
void KernelServer::handle_signals(bool between_cells) {
  MutexLock lock(signal_mutex_);
  signalfd_siginfo info;
  while (::read(signal_fd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
    if (info.ssi_signo == SIGINT) {
      if (!between_cells) interrupt();
    } else if (info.ssi_signo == SIGTERM || info.ssi_signo == SIGHUP || info.ssi_signo == SIGQUIT) {
      if (interrupt_handler_) interrupt_handler_();
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

// xeus calls this after a failed cell's reply, when the request asked stop_on_error:
// the requests that had arrived before that reply are aborted as the loop reaches
// them (after xeus publishes the failed cell's idle), and none that come later.
void KernelServer::abort_queue_impl(const listener&, long) {
  for (HeldRequest& held : held_) held.abort = true;
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
