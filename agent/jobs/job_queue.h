// JobQueue: which waiting job runs next. FIFO, with a limit on how many run
// at once. Pure bookkeeping, no processes; not thread-safe (the JobManager
// holds its lock around every call).
#pragma once

#include <cstddef>
#include <deque>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace gpubox::jobs {

class JobQueue {
 public:
  JobQueue(std::size_t max_running, std::size_t max_waiting) : max_running_(max_running), max_waiting_(max_waiting) {}

  // False when max_waiting jobs already wait.
  bool push(const std::string& id);
  // The next job to start, when a slot is free; it counts as running from now.
  std::optional<std::string> pop_startable();
  // A running job ended (or never started after pop_startable): frees its slot.
  void finished(const std::string& id);
  // Takes a waiting job out of the queue; false when it was not waiting.
  bool remove_waiting(const std::string& id);
  // Takes every waiting job out, in queue order.
  std::vector<std::string> drain_waiting();

  std::size_t running() const { return running_.size(); }
  std::size_t waiting() const { return waiting_.size(); }
  // 1-based place in the queue; 0 when not waiting.
  std::size_t position(const std::string& id) const;

 private:
  std::size_t max_running_;
  std::size_t max_waiting_;
  std::deque<std::string> waiting_;
  std::set<std::string> running_;
};

}  // namespace gpubox::jobs
