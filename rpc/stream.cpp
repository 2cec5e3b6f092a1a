#include "rpc/stream.h"

#include "rpc/client.h"

namespace gpubox::rpc {

Stream::Stream(Client& client, std::uint64_t id, std::uint64_t window, std::uint64_t credit_batch,
               std::chrono::milliseconds wait)
    : client_(client), id_(id), credit_batch_(credit_batch ? credit_batch : (window + 1) / 2), wait_(wait) {}

Stream::~Stream() {
  if (!ended()) (void)cancel();
  client_.pending_.erase(id_);
}

zmq::pollitem_t Stream::poll_item() const { return client_.poll_item(); }

void Stream::take(Received&& received) {
  switch (received.kind) {
    case Kind::data:
      data_.push_back(Incoming{std::move(received.body), std::move(received.attachments)});
      break;
    case Kind::credit:
      send_credit_ += received.credit;
      break;
    case Kind::result:
      result_attachments_ = std::move(received.attachments);
      final_ = std::move(received.body);
      break;
    case Kind::error:
      final_ = status_from_error_body(received.body);
      error_body_ = std::move(received.body);
      break;
    default:
      final_ = Status(ErrorCode::internal, "agent sent an unexpected message kind");
      break;
  }
}

Status Stream::pump() {
  auto received = client_.receive(id_, wait_);
  if (!received) {
    final_ = received.status();
    return received.status();
  }
  take(std::move(*received));
  return Status::ok();
}

Status Stream::grant(std::uint64_t credit) {
  Header header;
  header.id = id_;
  header.kind = Kind::credit;
  header.credit = credit;
  return client_.send_message(header, nlohmann::json::object());
}

Status Stream::settle() {
  if (!handed_out_) return Status::ok();
  handed_out_ = false;
  if (++consumed_since_grant_ < credit_batch_ || ended() || cancelled_) return Status::ok();
  std::uint64_t credit = consumed_since_grant_;
  consumed_since_grant_ = 0;
  return grant(credit);
}

Result<std::optional<Incoming>> Stream::hand_out() {
  if (data_.empty()) return std::optional<Incoming>();
  Incoming next = std::move(data_.front());
  data_.pop_front();
  if (credited_ahead_ > 0) {
    --credited_ahead_;  // already credited while send() waited
  } else {
    handed_out_ = true;
  }
  return std::optional<Incoming>(std::move(next));
}

Result<std::optional<Incoming>> Stream::next() {
  if (Status settled = settle(); !settled) return settled;
  while (data_.empty() && !ended()) {
    Status pumped = pump();
    if (!pumped) return pumped;
  }
  return hand_out();
}

Result<std::optional<Incoming>> Stream::try_next() {
  if (Status settled = settle(); !settled) return settled;
  while (data_.empty() && !ended()) {
    auto received = client_.try_receive(id_);
    if (!received) {
      final_ = received.status();
      return received.status();
    }
    if (!*received) break;
    take(std::move(**received));
  }
  return hand_out();
}

Result<std::optional<Incoming>> Stream::next_within(std::chrono::milliseconds wait) {
  auto give_up = Clock::now() + wait;
  while (true) {
    auto got = try_next();
    if (!got || *got || ended()) return got;
    auto left = std::chrono::ceil<std::chrono::milliseconds>(give_up - Clock::now());
    if (left.count() <= 0) return got;
    zmq::pollitem_t item = poll_item();
    zmq::poll(&item, 1, left);
  }
}

Status Stream::send(const nlohmann::json& body, std::vector<zmq::message_t> attachments) {
  if (Status settled = settle(); !settled) return settled;
  while (send_credit_ == 0) {
    if (ended()) return final_->is_ok() ? Status(ErrorCode::invalid_request, "the request has ended") : final_->status();
    std::size_t buffered = data_.size();
    Status pumped = pump();
    if (!pumped) return pumped;
    if (data_.size() > buffered && !ended()) {
      // The agent may be waiting for output credit before it reads more of
      // our input: credit what arrived (it is buffered here) so both sides move.
      std::uint64_t arrived = data_.size() - buffered;
      credited_ahead_ += arrived;
      if (Status sent = grant(arrived); !sent) return sent;
    }
  }
  --send_credit_;
  Header header;
  header.id = id_;
  header.kind = Kind::data;
  return client_.send_message(header, body, std::move(attachments));
}

Status Stream::cancel() {
  if (ended() || cancelled_) return Status::ok();
  cancelled_ = true;
  Header header;
  header.id = id_;
  header.kind = Kind::cancel;
  return client_.send_message(header, nlohmann::json::object());
}

}  // namespace gpubox::rpc
