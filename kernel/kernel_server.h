// The xeus server of gpubox's kernel: owns the five Jupyter sockets and the
// threads that serve them. xeus 2.4.1's own servers give no interrupt handler,
// leave iopub at ZeroMQ's default high-water mark (it drops output) and throw
// on EINTR, so this one:
//   - serves control on its own thread, so interrupt_request reaches the
//     interrupt handler while a cell runs on the shell thread;
//   - sets ZMQ_ROUTER_HANDOVER on shell, control and stdin, so a frontend that
//     connects again with its routing id is served, not ignored;
//   - publishes on an XPUB socket with ZMQ_XPUB_NODROP: a full queue makes the
//     publisher wait, never drop;
//   - optionally polls a signalfd on the control thread (standalone mode:
//     SIGINT interrupts, SIGTERM/SIGHUP stop); every thread keeps signals blocked;
//   - aborts, after a failed cell (stop_on_error), only the execute requests that
//     had arrived before its error reply went out, each answered "aborted" with
//     busy and idle around it, as ipykernel does: xeus's own abort_queue answers
//     every request of the next 50 ms with a bare error and publishes nothing, so
//     a cell sent right after an interrupted one was lost to a frontend;
//   - stamps the kernel's one execution count (execution_counter.h) on the
//     execute_input and execute_reply of each Jupyter cell;
//   - drops an interrupt_request that its session sent before the running cell.
// Threads: the caller of start() serves shell and stdin; "control" and
// "heartbeat" threads own their sockets; iopub is shared under a mutex.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <thread>

#include "base/thread_annotations.h"
#include "kernel/execution_counter.h"
#include "xeus/xauthentication.hpp"
#include "xeus/xeus_context.hpp"
#include "xeus/xkernel_configuration.hpp"
#include "xeus/xserver.hpp"
#include "zmq.hpp"
#include "zmq_addon.hpp"

namespace gpubox::kernel {

class KernelServer : public xeus::xserver {
 public:
  KernelServer(zmq::context_t& context, const xeus::xconfiguration& config, nl::json::error_handler_t eh);
  ~KernelServer() override;

  // Called on the control thread for interrupt_request and for SIGINT.
  void set_interrupt_handler(std::function<void()> handler) { interrupt_handler_ = std::move(handler); }
  // Called on the shell thread with true when it starts serving an execute_request, false when done.
  void set_cell_listener(std::function<void(bool)> on_cell) { cell_listener_ = std::move(on_cell); }
  // Called on the shell thread with each shell request before xeus sees it (set before
  // start); true: the interceptor served it and xeus never sees it (comms, see comm_router.h).
  void set_shell_interceptor(std::function<bool(const xeus::xmessage&)> interceptor) { shell_interceptor_ = std::move(interceptor); }
  // The count each visible Jupyter cell gets (set before start; null: xeus's own).
  void set_execution_counter(std::shared_ptr<ExecutionCounter> counter) { counter_ = std::move(counter); }
  // A signalfd the control thread reads (-1: none). Not owned.
  void set_signal_fd(int fd) { signal_fd_ = fd; }
  // The ports actually bound (port 0 in the configuration picks one).
  const xeus::xconfiguration& bound_config() const { return config_; }
  // Interrupts the running cell: the interrupt handler, and any input() wait.
  void interrupt();

  using xserver::notify_internal_listener;

 private:
  xeus::xcontrol_messenger& get_control_messenger_impl() override;
  void send_shell_impl(xeus::xmessage message) override;
  void send_control_impl(xeus::xmessage message) override;
  void send_stdin_impl(xeus::xmessage message) override;
  void publish_impl(xeus::xpub_message message, xeus::channel c) EXCLUDES(iopub_mutex_) override;
  void start_impl(xeus::xpub_message message) override;
  void abort_queue_impl(const listener& l, long polling_interval) override;
  void stop_impl() override;
  void update_config_impl(xeus::xconfiguration& config) const override;

  // One shell request: aborted (abort: it arrived before a failed cell's reply), or
  // served by the shell interceptor or xeus.
  void serve_shell(zmq::multipart_t& wire, bool abort);
  void reply_aborted(const xeus::xmessage& request);
  // The execute_request being served (its header, or null), for the control thread.
  void set_running_cell(const nl::json& header) EXCLUDES(running_cell_mutex_);
  // True when interrupt (a header) was sent before the running cell by its own session.
  bool sent_before_running_cell(const nl::json& interrupt) EXCLUDES(running_cell_mutex_);
  // Receives every shell request that has arrived into held_ (before an error reply goes out).
  void hold_arrived_requests();
  // The message with the kernel's count as content.execution_count when it belongs to the cell being served.
  template <class Message>
  Message with_kernel_count(Message message) const;
  void control_loop();
  void heartbeat_loop();
  // Reads the signalfd; between_cells (the shell thread, before a cell): SIGINT is dropped.
  void handle_signals(bool between_cells) EXCLUDES(signal_mutex_);

  class Messenger;
  xeus::xconfiguration config_;
  nl::json::error_handler_t error_handler_;
  std::unique_ptr<xeus::xauthentication> auth_;
  zmq::socket_t shell_;      // shell thread
  zmq::socket_t stdin_;      // shell thread
  zmq::socket_t control_;    // control thread
  zmq::socket_t heartbeat_;  // heartbeat thread
  Mutex iopub_mutex_;
  zmq::socket_t iopub_ GUARDED_BY(iopub_mutex_);
  std::unique_ptr<Messenger> messenger_;
  struct HeldRequest {
    zmq::multipart_t wire;
    bool abort = false;  // marked by abort_queue: answered "aborted" instead of served
  };
  std::deque<HeldRequest> held_;  // shell thread: received, not yet served, in arrival order
  std::shared_ptr<ExecutionCounter> counter_;
  Mutex running_cell_mutex_;
  nl::json running_cell_ GUARDED_BY(running_cell_mutex_);  // {session, date} of the cell being served
  std::string session_;  // the header session of the replies and statuses this server makes itself
  std::function<void()> interrupt_handler_;
  std::function<void(bool)> cell_listener_;
  std::function<bool(const xeus::xmessage&)> shell_interceptor_;
  int signal_fd_ = -1;
  // Held while a thread reads signal_fd_ and acts on what it read. It guards no
  // member (signal_fd_ is set before start and never changes) but the signalfd's
  // queue, which the analysis cannot name: handle_signals is where it is taken.
  Mutex signal_mutex_;
  // Atomics, no lock: flags that every thread's loop polls between waits.
  std::atomic<bool> stopping_{false};
  std::atomic<bool> cancel_input_{false};
  std::thread control_thread_;
  std::thread heartbeat_thread_;
};

// xkernel's server builder.
std::unique_ptr<xeus::xserver> make_kernel_server(xeus::xcontext& context, const xeus::xconfiguration& config,
                                                  nl::json::error_handler_t eh);

}  // namespace gpubox::kernel
