// Stream: one streaming request of a Client, seen from the client side. It
// keeps the request's flow control itself (rpc/PROTOCOL.md, "Flow control"):
// the agent's CREDIT is counted for send(), and the window is granted back as
// DATA is consumed. A Stream belongs to its Client's thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>
#include <zmq.hpp>

#include "base/status.h"
#include "rpc/call.h"

namespace gpubox::rpc {

class Client;
struct Received;

// A streaming request: DATA until the request ends, then its RESULT or ERROR.
// Either blocking (next()) or polled beside other descriptors: poll
// poll_item() with them, then take try_next() until it yields nothing.
//
// Credit: a DATA item counts as consumed once the caller comes back to the
// Stream after taking it (next(), try_next(), next_within() or send()), so
// its handling is done by then; the consumed items are granted back each
// time `credit_batch` of them have gathered (CallOptions; by default half the
// window), until the request ends or is cancelled.
class Stream {
 public:
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream();  // cancels the request unless it has ended

  // The next DATA message, waiting as CallOptions::wait says; nullopt once
  // the request has ended. Fails when the agent cannot be heard from.
  Result<std::optional<Incoming>> next();
  // The next DATA message if one has already arrived, never waiting: nullopt
  // when none has (poll poll_item() then) or the request has ended (ended()).
  // Fails when a message cannot be read (the stream has then ended with it).
  Result<std::optional<Incoming>> try_next();
  // As try_next(), waiting up to wait for a DATA message or the end.
  Result<std::optional<Incoming>> next_within(std::chrono::milliseconds wait);
  // The Client's socket as a ZMQ_POLLIN item. Only messages not yet taken
  // wake it: drain try_next() first.
  zmq::pollitem_t poll_item() const;

  // Sends DATA to the agent, waiting for the credit it grants when none is left.
  Status send(const nlohmann::json& body, std::vector<zmq::message_t> attachments = {});
  // DATA the agent is ready to take now: send() does not wait while it is above 0.
  std::uint64_t send_credit() const { return send_credit_; }
  // Sends CANCEL once (nothing once the request has ended); no credit is granted after it.
  Status cancel();

  bool ended() const { return final_.has_value(); }
  // REQUIRES: ended(). The RESULT body, or the ERROR (or failure) as a status.
  const Result<nlohmann::json>& result() const { return *final_; }
  // The frames after the RESULT's body (empty otherwise); moved out.
  std::vector<zmq::message_t> take_result_attachments() { return std::move(result_attachments_); }
  // The ERROR's body as received ({code, message, details}); null otherwise.
  const nlohmann::json& error_body() const { return error_body_; }
  std::uint64_t id() const { return id_; }

 private:
  friend class Client;
  Stream(Client& client, std::uint64_t id, std::uint64_t window, std::uint64_t credit_batch,
         std::chrono::milliseconds wait);
  Status pump();                   // waits (wait_) for one message of this stream
  void take(Received&& received);  // files one message of this stream
  Result<std::optional<Incoming>> hand_out();
  Status settle();                 // counts the item handed out last as consumed
  Status grant(std::uint64_t credit);

  Client& client_;
  std::uint64_t id_;
  std::uint64_t credit_batch_;
  std::uint64_t consumed_since_grant_ = 0;
  bool handed_out_ = false;           // an item went to the caller and is not yet counted
  std::uint64_t credited_ahead_ = 0;  // buffered DATA credited before it was consumed
  std::uint64_t send_credit_ = 0;
  bool cancelled_ = false;
  std::chrono::milliseconds wait_;
  std::deque<Incoming> data_;
  std::optional<Result<nlohmann::json>> final_;
  std::vector<zmq::message_t> result_attachments_;
  nlohmann::json error_body_;
};

}  // namespace gpubox::rpc
