#include "agent/event_loop.h"
#include "base/thread_annotations.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>

#include <cerrno>
#include <cstdint>

namespace gpubox {

Result<std::unique_ptr<EventLoop>> EventLoop::create() {
  Fd epoll(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll.valid()) return Status::from_errno(errno, "epoll_create1");
  Fd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) return Status::from_errno(errno, "eventfd");
  std::unique_ptr<EventLoop> loop(new EventLoop(std::move(epoll), std::move(wake)));
  Status added = loop->add_fd(loop->wake_.get(), [] {});
  if (!added) return added;
  return loop;
}

EventLoop::EventLoop(Fd epoll, Fd wake) : epoll_(std::move(epoll)), wake_(std::move(wake)) {}

Status EventLoop::add_fd(int fd, std::function<void()> on_readable) {
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.fd = fd;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &event) != 0) return Status::from_errno(errno, "epoll_ctl");
  fd_handlers_[fd] = std::move(on_readable);
  return Status::ok();
}

void EventLoop::remove_fd(int fd) {
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
  fd_handlers_.erase(fd);
}

Timers::TimerId EventLoop::schedule(Clock::duration delay, std::function<void()> fn) {
  TimerId id = next_timer_id_++;
  auto due = Clock::now() + delay;
  timers_.emplace(std::make_pair(due, id), std::move(fn));
  timer_due_.emplace(id, due);
  return id;
}

void EventLoop::cancel(TimerId id) {
  auto it = timer_due_.find(id);
  if (it == timer_due_.end()) return;
  timers_.erase({it->second, id});
  timer_due_.erase(it);
}

void EventLoop::post(std::function<void()> fn) {
  {
    MutexLock lock(posted_mutex_);
    posted_.push_back(std::move(fn));
  }
  std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(wake_.get(), &one, sizeof one);
}

void EventLoop::stop() {
  {
    MutexLock lock(posted_mutex_);
    stop_requested_ = true;
  }
  std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(wake_.get(), &one, sizeof one);
}

bool EventLoop::stop_called_from_callback() {
  MutexLock lock(posted_mutex_);
  if (stop_requested_) running_ = false;
  return !running_;
}

void EventLoop::drain_posted() {
  std::uint64_t count;
  [[maybe_unused]] auto n = ::read(wake_.get(), &count, sizeof count);
  std::vector<std::function<void()>> batch;
  {
    MutexLock lock(posted_mutex_);
    batch.swap(posted_);
    if (stop_requested_) running_ = false;
  }
  for (auto& fn : batch) fn();
}

void EventLoop::fire_due_timers() {
  auto now = Clock::now();
  while (!timers_.empty() && timers_.begin()->first.first <= now) {
    auto node = timers_.extract(timers_.begin());
    timer_due_.erase(node.key().second);
    node.mapped()();
    if (stop_called_from_callback()) return;
  }
}

int EventLoop::next_timeout_ms() const {
  if (timers_.empty()) return -1;
  auto wait = timers_.begin()->first.first - Clock::now();
  if (wait <= Clock::duration::zero()) return 0;
  // Round up so a timer never fires early and the loop never spins.
  return static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(wait).count());
}

void EventLoop::run() {
  running_ = true;
  drain_posted();
  epoll_event events[32];
  while (running_) {
    int n = ::epoll_wait(epoll_.get(), events, 32, next_timeout_ms());
    if (n < 0 && errno != EINTR) break;
    for (int i = 0; i < n && running_; ++i) {
      int fd = events[i].data.fd;
      if (fd == wake_.get()) {
        drain_posted();
        continue;
      }
      auto it = fd_handlers_.find(fd);
      if (it != fd_handlers_.end()) {
        auto handler = it->second;  // the handler may remove itself
        handler();
        stop_called_from_callback();
      }
    }
    if (running_) fire_due_timers();
  }
  running_ = false;
}

}  // namespace gpubox
