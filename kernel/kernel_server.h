// The xeus server of gpubox's kernel: owns the five Jupyter sockets and the
// threads that serve them. xeus 2.4.1's own servers give no interrupt hook,
// leave iopub at ZeroMQ's default high-water mark (it drops output) and throw
// on EINTR, so this one:
//   - serves control on its own thread, so interrupt_request reaches the
//     interrupt hook while a cell runs on the shell thread;
//   - sets ZMQ_ROUTER_HANDOVER on shell, control and stdin, so a frontend that
//     connects again with its routing id is served, not ignored;
//   - publishes on an XPUB socket with ZMQ_XPUB_NODROP: a full queue makes the
//     publisher wait, never drop;
//   - optionally polls a signalfd on the control thread (standalone mode:
//     SIGINT interrupts, SIGTERM/SIGHUP stop); every thread keeps signals blocked.
// Threads: the caller of start() serves shell and stdin; "control" and
// "heartbeat" threads own their sockets; iopub is shared under a mutex.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "xeus/xauthentication.hpp"
#include "xeus/xeus_context.hpp"
#include "xeus/xkernel_configuration.hpp"
#include "xeus/xserver.hpp"
#include "zmq.hpp"

namespace gpubox::kernel {

class KernelServer : public xeus::xserver {
 public:
  KernelServer(zmq::context_t& context, const xeus::xconfiguration& config, nl::json::error_handler_t eh);
  ~KernelServer() override;

  // Called on the control thread for interrupt_request and for SIGINT.
  void set_interrupt_hook(std::function<void()> hook) { interrupt_hook_ = std::move(hook); }
  // Called on the shell thread with each shell request before xeus sees it (set before
  // start); true: the hook served it and xeus never sees it (comms, see comm_router.h).
  void set_shell_hook(std::function<bool(const xeus::xmessage&)> hook) { shell_hook_ = std::move(hook); }
  // A signalfd the control thread reads (-1: none). Not owned.
  void set_signal_fd(int fd) { signal_fd_ = fd; }
  // The ports actually bound (port 0 in the configuration picks one).
  const xeus::xconfiguration& bound_config() const { return config_; }
  // Interrupts the running cell: the hook, and any input() wait.
  void interrupt();

  using xserver::notify_internal_listener;

 private:
  xeus::xcontrol_messenger& get_control_messenger_impl() override;
  void send_shell_impl(xeus::xmessage message) override;
  void send_control_impl(xeus::xmessage message) override;
  void send_stdin_impl(xeus::xmessage message) override;
  void publish_impl(xeus::xpub_message message, xeus::channel c) override;
  void start_impl(xeus::xpub_message message) override;
  void abort_queue_impl(const listener& l, long polling_interval) override;
  void stop_impl() override;
  void update_config_impl(xeus::xconfiguration& config) const override;

  void control_loop();
  void heartbeat_loop();
  void handle_signals();

  class Messenger;
  xeus::xconfiguration config_;
  nl::json::error_handler_t error_handler_;
  std::unique_ptr<xeus::xauthentication> auth_;
  zmq::socket_t shell_;      // shell thread
  zmq::socket_t stdin_;      // shell thread
  zmq::socket_t control_;    // control thread
  zmq::socket_t heartbeat_;  // heartbeat thread
  std::mutex iopub_mutex_;
  zmq::socket_t iopub_;  // guarded by iopub_mutex_
  std::unique_ptr<Messenger> messenger_;
  std::function<void()> interrupt_hook_;
  std::function<bool(const xeus::xmessage&)> shell_hook_;
  int signal_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> cancel_input_{false};
  std::thread control_thread_;
  std::thread heartbeat_thread_;
};

// xkernel's server builder.
std::unique_ptr<xeus::xserver> make_kernel_server(xeus::xcontext& context, const xeus::xconfiguration& config,
                                                  nl::json::error_handler_t eh);

}  // namespace gpubox::kernel
