// Timers: the clock and one-shot timers, behind an interface so that timing
// logic (supervisor backoff, shutdown grace, deadlines) runs under a fake
// clock in unit tests. Implementations say which thread may call them.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>

namespace gpubox {

class Timers {
 public:
  using Clock = std::chrono::steady_clock;
  using TimerId = std::uint64_t;
  virtual ~Timers() = default;
  virtual Clock::time_point now() const = 0;
  // Runs fn once, delay from now. Ids are never 0 and never reused.
  virtual TimerId schedule(Clock::duration delay, std::function<void()> fn) = 0;
  // Cancelling a fired or unknown timer does nothing.
  virtual void cancel(TimerId id) = 0;
};

}  // namespace gpubox
