// FnRunner: runs a caller's function on a thread of its own while the calling
// thread waits, asking stop every few milliseconds whether the call may go on
// and giving up after a limit. Work that does not end in time is abandoned:
// the caller gets the reason at once and goes on with everyone else's work;
// the abandoned thread is lowered to the least CPU priority and left to end
// when the work does (a thread cannot be stopped from outside), and the next
// run starts a fresh thread. So one caller's endless function costs that
// caller, not the model's other callers. One calling thread per runner.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

#include "base/status.h"

namespace gpubox::modeld {

class FnRunner {
 public:
  FnRunner() = default;
  ~FnRunner();  // its idle thread ends; a running one is left to end with its work
  FnRunner(const FnRunner&) = delete;
  FnRunner& operator=(const FnRunner&) = delete;

  // Runs work (which must own what it uses: abandoned, it outlives this call).
  // stop's status when it says the call may not go on, deadline_exceeded past
  // limit; in both cases the work is abandoned.
  Status run(std::function<void()> work, const std::function<Status()>& stop, std::chrono::milliseconds limit);

  // Abandoned work still running, in this process.
  static std::int64_t abandoned_running();

 private:
  struct Worker;
  std::shared_ptr<Worker> worker_;
};

}  // namespace gpubox::modeld
