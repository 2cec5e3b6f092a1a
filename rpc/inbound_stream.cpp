#include "rpc/inbound_stream.h"

#include <string>

namespace gpubox::rpc {

InboundStream::InboundStream(CallContext& call, InboundOptions options)
    : call_(call),
      window_(options.window),
      credit_batch_(options.credit_batch ? options.credit_batch : std::max<std::uint64_t>(1, options.window / 2)) {
  if (window_ > 0) grant(window_);
}

void InboundStream::grant(std::uint64_t credit) { call_.grant_credit(credit); }

void InboundStream::settle() {
  if (!handed_out_) return;
  handed_out_ = false;
  if (window_ == 0 || ++consumed_since_grant_ < credit_batch_) return;
  std::uint64_t credit = consumed_since_grant_;
  consumed_since_grant_ = 0;
  grant(credit);
}

Result<std::optional<Incoming>> InboundStream::try_next() { return next_within(std::chrono::milliseconds(0)); }

Result<std::optional<Incoming>> InboundStream::next_within(std::chrono::milliseconds wait) {
  settle();
  CallState& state = *call_.state_;
  MutexLock lock(state.mutex);
  if (wait.count() > 0) {
    state.changed.wait_for(lock, wait,
                           [&]() REQUIRES(state.mutex) { return !state.inbox.empty() || !state.stop_reason.is_ok(); });
  }
  if (!state.stop_reason.is_ok()) return state.stop_reason;
  std::optional<Incoming> next = state.take_delivered();
  if (next) handed_out_ = true;
  return next;
}

Status InboundStream::read_all(std::chrono::seconds idle_limit, std::string_view abandoned,
                               const std::function<Result<bool>(Incoming&)>& on_item) {
  while (true) {
    auto next = next_within(idle_limit);
    if (!next) return next.status();
    if (!*next) {
      return Status(ErrorCode::deadline_exceeded,
                    "no DATA for " + std::to_string(idle_limit.count()) + " s; " + std::string(abandoned));
    }
    auto ended = on_item(**next);
    if (!ended) return ended.status();
    if (*ended) return Status::ok();
  }
}

void InboundStream::match_credit(std::uint64_t credit) {
  std::uint64_t held;
  {
    CallState& state = *call_.state_;
    MutexLock lock(state.mutex);
    held = state.credit_in + state.inbox.size();
  }
  if (credit > held) grant(credit - held);
}

}  // namespace gpubox::rpc
