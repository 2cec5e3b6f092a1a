#include "rpc/call.h"
#include "base/thread_annotations.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <utility>

namespace gpubox::rpc {
namespace {

void raise_fd(int fd) {
  std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(fd, &one, sizeof one);
}

void lower_fd(int fd) {
  std::uint64_t value;
  [[maybe_unused]] auto n = ::read(fd, &value, sizeof value);
}

}  // namespace

CallState::CallState(std::uint64_t id_, std::string method_, std::optional<Clock::time_point> deadline_,
                     std::uint64_t window_)
    : id(id_),
      method(std::move(method_)),
      deadline(deadline_),
      window(window_),
      credit_out(window_) {}

CallState::~CallState() {
  if (stop_fd_ >= 0) ::close(stop_fd_);
  if (data_fd_ >= 0) ::close(data_fd_);
}

int CallState::stop_fd() {
  MutexLock lock(mutex);
  if (stop_fd_ < 0) {
    stop_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (!stop_reason.is_ok()) raise_fd(stop_fd_);
  }
  return stop_fd_;
}

int CallState::data_fd() {
  MutexLock lock(mutex);
  if (data_fd_ < 0) {
    data_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (!inbox.empty()) raise_fd(data_fd_);
  }
  return data_fd_;
}

bool CallState::deliver(Incoming incoming) {
  {
    MutexLock lock(mutex);
    if (credit_in == 0) return false;
    --credit_in;
    inbox.push_back(std::move(incoming));
    if (data_fd_ >= 0) raise_fd(data_fd_);
  }
  changed.notify_all();
  return true;
}

std::optional<Incoming> CallState::take_delivered() {
  if (inbox.empty()) return std::nullopt;
  Incoming next = std::move(inbox.front());
  inbox.pop_front();
  if (inbox.empty() && data_fd_ >= 0) lower_fd(data_fd_);
  return next;
}

bool CallState::stop(Status reason) {
  {
    MutexLock lock(mutex);
    if (finished) return false;
    finished = true;
    stop_reason = std::move(reason);
    if (stop_fd_ >= 0) raise_fd(stop_fd_);
  }
  changed.notify_all();
  return true;
}

bool CallState::finish() {
  std::function<void()> dropped;  // destroyed after the lock: it may own what owns this state
  MutexLock lock(mutex);
  dropped.swap(stop_callback);
  if (finished) return false;
  finished = true;
  return true;
}

std::function<void()> CallState::take_stop_callback() {
  MutexLock lock(mutex);
  return std::exchange(stop_callback, nullptr);
}

CallContext::CallContext(std::shared_ptr<CallState> state, nlohmann::json params,
                         std::vector<zmq::message_t> attachments, std::string peer, Send send, Finish finish)
    : state_(std::move(state)),
      params_(std::move(params)),
      attachments_(std::move(attachments)),
      peer_(std::move(peer)),
      send_(std::move(send)),
      finish_(std::move(finish)) {}

bool CallContext::answer(const Result<nlohmann::json>& result) {
  if (!finish_ || !state_->finish()) return false;
  finish_(result, *this);
  return true;
}

void CallContext::on_stop(std::function<void()> callback) {
  MutexLock lock(state_->mutex);
  state_->stop_callback = std::move(callback);
}

Status CallContext::stop_reason() const {
  MutexLock lock(state_->mutex);
  return state_->stop_reason;
}

bool CallContext::wait_stopped(std::chrono::milliseconds timeout) const {
  MutexLock lock(state_->mutex);
  return state_->changed.wait_for(lock, timeout,
                                  [&]() REQUIRES(state_->mutex) { return !state_->stop_reason.is_ok(); });
}

Status CallContext::send_data(const nlohmann::json& body, std::vector<zmq::message_t> attachments) {
  {
    MutexLock lock(state_->mutex);
    state_->changed.wait(
        lock, [&]() REQUIRES(state_->mutex) { return state_->credit_out > 0 || !state_->stop_reason.is_ok(); });
    if (!state_->stop_reason.is_ok()) return state_->stop_reason;
    if (state_->finished) return Status(ErrorCode::internal, "send_data after the call finished");
    --state_->credit_out;
  }
  Outgoing out;
  out.header.id = state_->id;
  out.header.kind = Kind::data;
  out.body = encode_body(body);
  out.attachments = std::move(attachments);
  send_(std::move(out));
  return Status::ok();
}

std::uint64_t CallContext::data_credit() const {
  MutexLock lock(state_->mutex);
  return state_->credit_out;
}

void CallContext::grant_credit(std::uint64_t credit) {
  {
    MutexLock lock(state_->mutex);
    if (state_->finished) return;
    state_->credit_in += credit;
  }
  Outgoing out;
  out.header.id = state_->id;
  out.header.kind = Kind::credit;
  out.header.credit = credit;
  out.body = encode_body(nlohmann::json::object());
  send_(std::move(out));
}

}  // namespace gpubox::rpc
