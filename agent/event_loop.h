// EventLoop: an epoll loop with timers, owned by one thread. run(), add_fd(),
// remove_fd(), schedule() and cancel() belong to that thread; post() and
// stop() may be called from any thread.
#pragma once

#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "base/fd.h"
#include "agent/timers.h"
#include "base/status.h"
#include "base/thread_annotations.h"

namespace gpubox {

class EventLoop final : public Timers {
 public:
  static Result<std::unique_ptr<EventLoop>> create();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Calls on_readable on the loop thread whenever fd is readable.
  Status add_fd(int fd, std::function<void()> on_readable);
  void remove_fd(int fd);

  Clock::time_point now() const override { return Clock::now(); }
  TimerId schedule(Clock::duration delay, std::function<void()> fn) override;
  void cancel(TimerId id) override;

  // Runs fn on the loop thread, in posting order.
  void post(std::function<void()> fn);
  // Runs until stop(); returns after the callback that called stop().
  void run();
  void stop();

 private:
  EventLoop(Fd epoll, Fd wake);
  void drain_posted();
  void fire_due_timers();
  // After a callback: ends the loop if stop() was called; true if it was.
  bool stop_called_from_callback();
  int next_timeout_ms() const;

  Fd epoll_;
  Fd wake_;  // eventfd that post() and stop() write to
  std::unordered_map<int, std::function<void()>> fd_handlers_;
  std::map<std::pair<Clock::time_point, TimerId>, std::function<void()>> timers_;
  std::unordered_map<TimerId, Clock::time_point> timer_due_;
  TimerId next_timer_id_ = 1;
  bool running_ = false;

  Mutex posted_mutex_;
  std::vector<std::function<void()>> posted_ GUARDED_BY(posted_mutex_);
  bool stop_requested_ GUARDED_BY(posted_mutex_) = false;
};

}  // namespace gpubox
