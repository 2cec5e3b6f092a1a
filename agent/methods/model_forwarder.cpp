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
#include "agent/model_host.h"
#include "rpc/client.h"

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
  Forwarder(const ModelHost& host, rpc::CallContext& call) : host_(host), call_(call) {}

  Result<json> run() {
    ModelHostView view = host_.view();
    if (view.state != "running" || !view.ended) return host_.unavailable(view);
    ended_ = view.ended;
    rpc::ClientOptions options;
    options.endpoint = view.endpoint;
    options.connect_timeout = kConnectTimeout;
    auto connected = rpc::Client::connect(options);
    if (!connected) {
      ModelHostView now = host_.view();
      if (now.state != "running") return host_.unavailable(now);
      return Status(ErrorCode::unavailable, "cannot reach the model host: " + connected.status().message());
    }
    client_ = std::move(*connected);
    if (Status sent = send_call(); !sent) return sent;
    return relay();
  }

 private:
  Status send_call() {
    rpc::Header header;
    id_ = client_->next_id();
    header.id = id_;
    header.kind = rpc::Kind::call;
    header.method = call_.method();
    header.credit = kWindowToModeld;
    if (auto deadline = call_.deadline()) {
      auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - rpc::Clock::now()).count();
      if (left <= 0) return Status(ErrorCode::deadline_exceeded, "the request ran past its deadline");
      header.timeout_ms = static_cast<std::uint64_t>(left);
    }
    return client_->send_message(header, call_.params(), std::move(call_.attachments()));
  }

  Result<json> relay() {
    zmq::pollitem_t items[] = {client_->poll_item(),
                               {nullptr, call_.stop_fd(), ZMQ_POLLIN, 0},
                               {nullptr, ended_->get(), ZMQ_POLLIN, 0},
                               {nullptr, call_.data_fd(), ZMQ_POLLIN, 0}};
    while (true) {
      auto got = client_->try_receive(id_);
      if (!got) return Status(ErrorCode::internal, "the model host sent a malformed message: " + got.status().message());
      if (*got) {
        std::optional<Result<json>> final = handle(std::move(**got));
        if (final) return std::move(*final);
        continue;
      }
      for (auto& item : items) item.revents = 0;
      zmq::poll(items, std::size(items), std::chrono::milliseconds(1000));
      if (items[1].revents) return stop_modeld();
      if (items[2].revents) return ended_during_call();
      if (items[3].revents) {
        if (Status sent = forward_caller_data(); !sent) return sent;
      }
    }
  }

  // nullopt while the call goes on; the call's outcome once modeld has answered.
  std::optional<Result<json>> handle(rpc::Received received) {
    switch (received.kind) {
      case rpc::Kind::data: {
        Status sent = call_.send_data(host_.scrub(std::move(received.body)), std::move(received.attachments));
        if (!sent) return stop_modeld();
        rpc::Header credit;
        credit.id = id_;
        credit.kind = rpc::Kind::credit;
        credit.credit = 1;
        if (Status granted = client_->send_message(credit, json::object()); !granted) return Result<json>(granted);
        return std::nullopt;
      }
      case rpc::Kind::credit:
        call_.grant_credit(received.credit);
        return std::nullopt;
      case rpc::Kind::result:
        call_.set_result_attachments(std::move(received.attachments));
        return Result<json>(host_.scrub(std::move(received.body)));
      case rpc::Kind::error:
        return Result<json>(rpc::status_from_error_body(host_.scrub(std::move(received.body))));
      default:
        return Result<json>(Status(ErrorCode::internal, "the model host sent an unexpected message kind"));
    }
  }

  Status forward_caller_data() {
    while (true) {
      auto incoming = call_.receive_data(std::chrono::milliseconds(0));
      if (!incoming) return incoming.status();
      if (!*incoming) return Status::ok();
      rpc::Header header;
      header.id = id_;
      header.kind = rpc::Kind::data;
      Status sent = client_->send_message(header, (*incoming)->body, std::move((*incoming)->attachments));
      if (!sent) return sent;
    }
  }

  // The caller cancelled, passed its deadline or went away: modeld stops too.
  Status stop_modeld() {
    rpc::Header cancel;
    cancel.id = id_;
    cancel.kind = rpc::Kind::cancel;
    if (client_->send_message(cancel, json::object())) {
      auto give_up = rpc::Clock::now() + kCancelAnswerWait;
      while (rpc::Clock::now() < give_up) {
        auto left = std::chrono::ceil<std::chrono::milliseconds>(give_up - rpc::Clock::now());
        auto received = client_->receive(id_, std::max(left, std::chrono::milliseconds(1)));
        if (!received || received->kind == rpc::Kind::result || received->kind == rpc::Kind::error) break;
      }
    }
    Status reason = call_.stop_reason();
    return reason.is_ok() ? Status(ErrorCode::cancelled, "cancelled") : reason;
  }

  Status ended_during_call() const {
    ModelHostView now = host_.view();
    std::string next = now.state == "failed"     ? "it failed and is not restarted: " + now.error
                       : now.state == "stopping" ? "the agent is shutting down"
                                                 : "it is restarting and reloading its models";
    return Status(ErrorCode::unavailable, "the model host exited (" + (now.last_exit.empty() ? "ended" : now.last_exit) +
                                              ") during " + call_.method() + "; " + next);
  }

  const ModelHost& host_;
  rpc::CallContext& call_;
  std::shared_ptr<const Fd> ended_;
  std::unique_ptr<rpc::Client> client_;
  std::uint64_t id_ = 0;
};

}  // namespace

void add_model_methods(rpc::MethodRegistry& methods, const ModelHost* host) {
  auto forward = [host](rpc::CallContext& call) -> Result<json> {
    if (!host) return Status(ErrorCode::unavailable, "no model host: the config has no model_host section");
    return Forwarder(*host, call).run();
  };
  methods.add_prefix("model.", forward);
  methods.add_prefix("gpu.", forward);
}

}  // namespace gpubox
