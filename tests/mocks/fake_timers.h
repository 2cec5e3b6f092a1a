// FakeTimers: a Timers whose clock moves only when the test advances it, so
// that backoff, grace and deadline logic is tested to the millisecond without
// sleeping. Timers fire in (due time, id) order, each seeing now() equal to
// its own due time. Single-threaded: only the test thread may call it.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <utility>

#include "agent/timers.h"

namespace gpubox::test {

class FakeTimers final : public Timers {
 public:
  FakeTimers() = default;
  FakeTimers(const FakeTimers&) = delete;
  FakeTimers& operator=(const FakeTimers&) = delete;

  Clock::time_point now() const override { return now_; }

  TimerId schedule(Clock::duration delay, std::function<void()> fn) override {
    if (delay < Clock::duration::zero()) delay = Clock::duration::zero();
    TimerId id = next_id_++;
    timers_.emplace(Key{now_ + delay, id}, std::move(fn));
    due_.emplace(id, now_ + delay);
    return id;
  }

  void cancel(TimerId id) override {
    auto it = due_.find(id);
    if (it == due_.end()) return;
    timers_.erase(Key{it->second, id});
    due_.erase(it);
  }

  // Moves the clock forward by `by`, firing on the way every timer that falls
  // due, those scheduled by the callbacks themselves included.
  void advance(Clock::duration by) {
    const Clock::time_point target = now_ + by;
    while (!timers_.empty() && timers_.begin()->first.first <= target) {
      auto node = timers_.extract(timers_.begin());
      due_.erase(node.key().second);
      now_ = node.key().first;
      ++fired_;
      node.mapped()();
    }
    now_ = target;
  }

  // Advances exactly to the earliest pending timer and fires it (with any due
  // at the same instant). False when nothing is pending.
  bool run_next() {
    auto delay = next_delay();
    if (!delay) return false;
    advance(*delay);
    return true;
  }

  // How long from now the earliest pending timer is due; nullopt when none is.
  std::optional<Clock::duration> next_delay() const {
    if (timers_.empty()) return std::nullopt;
    return timers_.begin()->first.first - now_;
  }

  size_t pending() const { return timers_.size(); }
  size_t fired() const { return fired_; }

 private:
  using Key = std::pair<Clock::time_point, TimerId>;

  // An arbitrary, non-zero epoch, so that "now - delay" never underflows.
  Clock::time_point now_ = Clock::time_point(std::chrono::hours(1000));
  TimerId next_id_ = 1;
  size_t fired_ = 0;
  std::map<Key, std::function<void()>> timers_;
  std::map<TimerId, Clock::time_point> due_;
};

}  // namespace gpubox::test
