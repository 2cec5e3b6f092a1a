// InboundStream: the client's DATA of one call, seen from the method's side;
// the mirror of the client's rpc::Stream (rpc/stream.h). It keeps the
// client → agent flow control itself (rpc/PROTOCOL.md, "Flow control"): it
// grants the window when opened and grants it back as the method consumes,
// so the client never has more than the window in flight or queued here.
// Used from the call's handler thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>
#include <zmq.hpp>

#include "base/status.h"
#include "rpc/call.h"

namespace gpubox::rpc {

struct InboundOptions {
  // DATA the client may send ahead of what the method has consumed. 0: no
  // window of its own: the credit follows a next hop's (match_credit()).
  std::uint64_t window = 8;
  // Consumed items granted back together; 0: half the window (at least 1).
  std::uint64_t credit_batch = 0;
};

// Blocking (next_within(), read_all()) or polled beside other descriptors:
// poll poll_fd() (readable while DATA is queued) with them and the call's
// stop_fd(), then take try_next() until it yields nothing.
//
// Credit: a DATA item counts as consumed once the method comes back to the
// stream after taking it (try_next(), next_within() or read_all()'s next
// turn), so its handling is done by then; the consumed items are granted
// back each time `credit_batch` of them have gathered, until the call ends.
class InboundStream {
 public:
  InboundStream(CallContext& call, InboundOptions options = {});
  InboundStream(const InboundStream&) = delete;
  InboundStream& operator=(const InboundStream&) = delete;

  // The next DATA if one is queued, never waiting: nullopt when none is.
  // Fails with the stop reason once the call stopped.
  Result<std::optional<Incoming>> try_next();
  // As try_next(), waiting up to wait for a DATA message or the call's stop.
  Result<std::optional<Incoming>> next_within(std::chrono::milliseconds wait);
  // Calls on_item for each DATA until it returns true (the end, by the
  // method's own rule) or an error, returned as it is. No DATA for
  // idle_limit is deadline_exceeded: "no DATA for N s; " + abandoned.
  Status read_all(std::chrono::seconds idle_limit, std::string_view abandoned,
                  const std::function<Result<bool>(Incoming&)>& on_item);

  // Readable while DATA is queued (level-triggered; drain try_next()).
  int poll_fd() const { return call_.state_->data_fd(); }
  zmq::pollitem_t poll_item() const { return {nullptr, poll_fd(), ZMQ_POLLIN, 0}; }

  // For a relay with no window of its own (window 0): raises the credit the
  // client holds, counting DATA queued here, to `credit`, the DATA the next
  // hop will take now; never lowers it (CREDIT cannot be taken back).
  void match_credit(std::uint64_t credit);

 private:
  void settle();  // counts the item handed out last as consumed
  void grant(std::uint64_t credit);

  CallContext& call_;
  const std::uint64_t window_;
  const std::uint64_t credit_batch_;
  std::uint64_t consumed_since_grant_ = 0;
  bool handed_out_ = false;  // an item went to the method and is not yet counted
};

}  // namespace gpubox::rpc
