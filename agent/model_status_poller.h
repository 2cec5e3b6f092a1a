// ModelStatusPoller: a thread of its own that asks gpubox-modeld for
// modeld.status (every 250 ms while models load, every second after) over a
// private rpc::Client, reports each answer, and reports a process that has
// answered once and then stays silent for kUnresponsiveAfter as hung. The
// callbacks run on the poller's thread; construct and destroy on one thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "base/thread_annotations.h"

namespace gpubox {

class ModelStatusPoller {
 public:
  struct Target {
    std::uint64_t generation = 0;  // 0: no process runs
    bool loading = true;           // poll fast
  };
  struct Callbacks {
    std::function<Target()> target;
    std::function<void(std::uint64_t generation, const nlohmann::json& status)> on_status;
    std::function<void(std::uint64_t generation)> on_unresponsive;
  };
  static constexpr std::chrono::seconds kUnresponsiveAfter{15};

  ModelStatusPoller(std::string endpoint, Callbacks callbacks);
  ModelStatusPoller(const ModelStatusPoller&) = delete;
  ModelStatusPoller& operator=(const ModelStatusPoller&) = delete;
  ~ModelStatusPoller();
  // Polls at once instead of at the next tick (a process just started).
  void poke();

 private:
  void run();

  const std::string endpoint_;
  const Callbacks callbacks_;
  Mutex mutex_;
  std::condition_variable_any wake_;
  bool stop_ GUARDED_BY(mutex_) = false;
  bool poked_ GUARDED_BY(mutex_) = false;
  std::thread thread_;   // last: starts once the members above exist
};

}  // namespace gpubox
