// model.* and gpu.*: forwarded to gpubox-modeld over its private ipc socket,
// one rpc::Client per call (a call never sees a reply meant for a process that
// has since been replaced). Params and attachments go through as they are
// (zmq messages moved, not copied); modeld's DATA reach the caller one by one
// under the caller's credit, with a small window towards modeld, so a slow
// caller slows modeld instead of filling the agent; modeld's CREDIT becomes
// the caller's, and the caller's DATA go to modeld. The caller's CANCEL and
// deadline reach modeld; modeld ending mid-call ends the call at once.
#include <chrono>
#include <zmq.hpp>

#include "agent/methods/methods.h"
#include "agent/modeld_supervisor.h"
#include "rpc/client.h"
#include "rpc/inbound_stream.h"

namespace gpubox {
namespace {

using nlohmann::json;

// DATA modeld may send ahead of what the caller has taken.
constexpr std::uint64_t kWindowToModeld = 4;
constexpr std::chrono::milliseconds kConnectTimeout{2000};
// After a CANCEL: how long modeld's own answer is awaited (it confirms the CANCEL was delivered).
constexpr std::chrono::milliseconds kCancelAnswerWait{1000};

class Forwarder {
 public:
  Forwarder(const ModeldSupervisor& modeld, rpc::CallContext& call) : modeld_(modeld), call_(call) {}

  Result<json> run() {
    ModeldView view = modeld_.view();
    if (view.state != "running" || !view.ended) return modeld_.unavailable(view);
    ended_ = view.ended;
    rpc::ClientOptions options;
    options.endpoint = view.endpoint;
    options.connect_timeout = kConnectTimeout;
    auto connected = rpc::Client::connect(options);
    if (!connected) {
      ModeldView now = modeld_.view();
      if (now.state != "running") return modeld_.unavailable(now);
      return Status(ErrorCode::unavailable, "cannot reach the model host: " + connected.status().message());
    }
    client_ = std::move(*connected);
    rpc::CallOptions forward;
    forward.window = kWindowToModeld;
    forward.credit_batch = 1;  // each item granted again once the caller has it
    forward.attachments = &call_.attachments();
    if (auto deadline = call_.deadline()) {
      auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - rpc::Clock::now()).count();
      if (left <= 0) return Status(ErrorCode::deadline_exceeded, "the request ran past its deadline");
      forward.timeout_ms = static_cast<std::uint64_t>(left);
    }
    auto opened = client_->stream(call_.method(), call_.params(), forward);
    if (!opened) return opened.status();
    stream_ = std::move(*opened);
    from_caller_.emplace(call_, rpc::InboundOptions{.window = 0});  // its credit follows modeld's
    return relay();
  }

 private:
  Result<json> relay() {
    zmq::pollitem_t items[] = {stream_->poll_item(),
                               {nullptr, call_.stop_fd(), ZMQ_POLLIN, 0},
                               {nullptr, ended_->get(), ZMQ_POLLIN, 0},
                               from_caller_->poll_item()};
    while (true) {
      auto got = stream_->try_next();
      if (!got) return Status(ErrorCode::internal, "the model host sent a malformed message: " + got.status().message());
      from_caller_->match_credit(stream_->send_credit());  // modeld's CREDIT becomes the caller's
      if (*got) {
        Status sent = call_.send_data(modeld_.scrub(std::move((*got)->body)), std::move((*got)->attachments));
        if (!sent) return stop_modeld();
        continue;
      }
      if (stream_->ended()) return outcome();
      for (auto& item : items) item.revents = 0;
      zmq::poll(items, std::size(items), std::chrono::milliseconds(1000));
      if (items[1].revents) return stop_modeld();
      if (items[2].revents) return ended_during_call();
      if (items[3].revents) {
        if (Status sent = forward_caller_data(); !sent) return sent;
      }
    }
  }

  // modeld's answer, as the caller's.
  Result<json> outcome() {
    const Result<json>& answer = stream_->result();
    if (!answer) return Status(answer.status().code(), modeld_.scrub(answer.status().message()));
    call_.set_result_attachments(stream_->take_result_attachments());
    return modeld_.scrub(answer.value());
  }

  Status forward_caller_data() {
    while (true) {
      auto incoming = from_caller_->try_next();
      if (!incoming) return incoming.status();
      if (!*incoming) return Status::ok();
      // The caller sends no more than the credit passed on; send() would wait otherwise.
      if (stream_->send_credit() == 0) return Status(ErrorCode::internal, "caller DATA beyond the model host's credit");
      if (Status sent = stream_->send((*incoming)->body, std::move((*incoming)->attachments)); !sent) return sent;
    }
  }

  // The caller cancelled, passed its deadline or went away: modeld stops too.
  Status stop_modeld() {
    if (stream_->cancel()) {
      auto give_up = rpc::Clock::now() + kCancelAnswerWait;
      while (!stream_->ended() && rpc::Clock::now() < give_up) {
        auto left = std::chrono::ceil<std::chrono::milliseconds>(give_up - rpc::Clock::now());
        if (!stream_->next_within(std::max(left, std::chrono::milliseconds(1)))) break;
      }
    }
    Status reason = call_.stop_reason();
    return reason.is_ok() ? Status(ErrorCode::cancelled, "cancelled") : reason;
  }

  Status ended_during_call() const {
    ModeldView now = modeld_.view();
    std::string next = now.state == "failed"     ? "it failed and is not restarted: " + now.error
                       : now.state == "stopping" ? "the agent is shutting down"
                                                 : "it is restarting and reloading its models";
    return Status(ErrorCode::unavailable, "the model host exited (" + (now.last_exit.empty() ? "ended" : now.last_exit) +
                                              ") during " + call_.method() + "; " + next);
  }

  const ModeldSupervisor& modeld_;
  rpc::CallContext& call_;
  std::shared_ptr<const Fd> ended_;
  std::unique_ptr<rpc::Client> client_;
  std::unique_ptr<rpc::Stream> stream_;  // before client_ in destruction: it is client_'s
  std::optional<rpc::InboundStream> from_caller_;  // the caller's DATA, bound for modeld
};

}  // namespace

void add_modeld_forwarders(rpc::MethodRegistry& methods, const ModeldSupervisor* modeld) {
  auto forward = [modeld](rpc::CallContext& call) -> Result<json> {
    if (!modeld) return Status(ErrorCode::unavailable, "no model host: the config has no model_host section");
    return Forwarder(*modeld, call).run();
  };
  methods.add_prefix("model.", forward);
  methods.add_prefix("gpu.", forward);
}

}  // namespace gpubox
