// One request in flight, as a method handler sees it. A handler runs on one
// worker thread (or, for inline methods, on the server's I/O thread) and uses
// its CallContext from that thread only; the server's I/O thread feeds it
// credit, client DATA and cancellation through the shared CallState.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "base/thread_annotations.h"
#include "rpc/protocol.h"
#include "base/status.h"

namespace gpubox::rpc {

using Clock = std::chrono::steady_clock;

// A DATA message from the client.
struct Incoming {
  nlohmann::json body;
  std::vector<zmq::message_t> attachments;
};

// Frames the server's I/O thread sends for a call; final marks RESULT/ERROR.
struct Outgoing {
  Header header;
  std::string body;
  std::vector<zmq::message_t> attachments;
};

// State shared by the I/O thread and the handler's thread.
struct CallState {
  CallState(std::uint64_t id, std::string method, std::optional<Clock::time_point> deadline, std::uint64_t window);
  ~CallState();
  CallState(const CallState&) = delete;
  CallState& operator=(const CallState&) = delete;

  // Marks the call stopped (cancelled, deadline, shutdown) unless it already
  // finished. Returns true when this call did the marking.
  bool stop(Status reason) EXCLUDES(mutex);
  // Marks the call finished; false when it had already finished or stopped.
  // Either way the stop callback is dropped.
  bool finish() EXCLUDES(mutex);
  // The callback to run now that the call stopped (empty when none was set).
  std::function<void()> take_stop_callback() EXCLUDES(mutex);

  const std::uint64_t id;
  const std::string method;
  const std::optional<Clock::time_point> deadline;
  const std::uint64_t window;

  // Readable once stopped: lets poll()-based handlers wake on cancellation.
  // Created on first use; most calls never need it.
  int stop_fd() EXCLUDES(mutex);
  // Readable while DATA is queued. Created on first use.
  int data_fd() EXCLUDES(mutex);
  // Queues one DATA message from the client (the I/O thread); false when
  // the client had no credit left for it.
  bool deliver(Incoming incoming) EXCLUDES(mutex);
  // Takes the oldest queued DATA message (the method's thread), lowering
  // data_fd once none is left; nullopt when none is queued.
  std::optional<Incoming> take_delivered() REQUIRES(mutex);

  Mutex mutex;
  std::condition_variable_any changed;
  std::uint64_t credit_out GUARDED_BY(mutex) = 0;  // DATA the client is ready to receive
  std::uint64_t credit_in GUARDED_BY(mutex) = 0;   // DATA the client may still send
  std::deque<Incoming> inbox GUARDED_BY(mutex);
  bool finished GUARDED_BY(mutex) = false;
  Status stop_reason GUARDED_BY(mutex);               // not ok once stopped
  int stop_fd_ GUARDED_BY(mutex) = -1;
  int data_fd_ GUARDED_BY(mutex) = -1;
  std::function<void()> stop_callback GUARDED_BY(mutex);  // CallContext::on_stop's
};

class CallContext {
 public:
  using Send = std::function<void(Outgoing&&)>;
  // Sends the RESULT or ERROR that ends the call (the server's; absent for inline methods).
  using Finish = std::function<void(const Result<nlohmann::json>&, CallContext&)>;
  CallContext(std::shared_ptr<CallState> state, nlohmann::json params, std::vector<zmq::message_t> attachments,
              std::string peer, Send send, Finish finish = nullptr);

  std::uint64_t id() const { return state_->id; }
  const std::string& method() const { return state_->method; }
  const nlohmann::json& params() const { return params_; }
  std::vector<zmq::message_t>& attachments() { return attachments_; }
  // The client's public key (Z85), or "local" on an ipc endpoint.
  const std::string& peer() const { return peer_; }
  std::optional<Clock::time_point> deadline() const { return state_->deadline; }

  // Not ok once the call was cancelled, passed its deadline or the server stops.
  Status stop_reason() const;
  bool stopped() const { return !stop_reason().is_ok(); }
  int stop_fd() const { return state_->stop_fd(); }
  // Waits until stopped or timeout passes; true when stopped.
  bool wait_stopped(std::chrono::milliseconds timeout) const;

  // Sends one DATA message; waits while the client has no credit left. Fails
  // with the stop reason when the call stops while waiting.
  Status send_data(const nlohmann::json& body, std::vector<zmq::message_t> attachments = {});
  // How many DATA messages send_data() could send now without waiting.
  std::uint64_t data_credit() const;
  // The client's DATA are read through an InboundStream (rpc/inbound_stream.h),
  // which grants the client its credit.

  // Frames sent after the RESULT's body when the handler succeeds (a
  // forwarded reply's tensors); moved, never copied.
  void set_result_attachments(std::vector<zmq::message_t> attachments) { result_attachments_ = std::move(attachments); }
  std::vector<zmq::message_t> take_result_attachments() { return std::move(result_attachments_); }
  // The ERROR's "details" map when the handler fails (a served function's traceback).
  void set_error_details(nlohmann::json details) { error_details_ = std::move(details); }
  const nlohmann::json& error_details() const { return error_details_; }

  // Ends the call now with result (and the result attachments / error details
  // set so far), from any thread, while the handler is still running — so an
  // answer that arrives on another thread (a served function's) goes out
  // without waking the handler's thread first. The handler's own return value
  // is then ignored; it must not return before answer() has. False when the
  // call had already ended (answered, cancelled, past its deadline) or cannot
  // be answered early (an inline method).
  bool answer(const Result<nlohmann::json>& result);

  // For a call a fast path took (it has no handler to watch stop_fd): callback
  // runs once, on a worker thread, if the call stops before it is answered.
  // REQUIRES: on the server's I/O thread, inside the fast path.
  void on_stop(std::function<void()> callback);

 private:
  friend class InboundStream;
  // Lets the client send `credit` more DATA messages (nothing once the call ended).
  void grant_credit(std::uint64_t credit);

  std::shared_ptr<CallState> state_;
  nlohmann::json params_;
  std::vector<zmq::message_t> attachments_;
  std::string peer_;
  Send send_;
  Finish finish_;
  std::vector<zmq::message_t> result_attachments_;
  nlohmann::json error_details_;
};

}  // namespace gpubox::rpc
