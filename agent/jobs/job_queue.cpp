#include "agent/jobs/job_queue.h"

#include <algorithm>

namespace gpubox::jobs {

bool JobQueue::push(const std::string& id) {
  if (waiting_.size() >= max_waiting_) return false;
  waiting_.push_back(id);
  return true;
}

std::optional<std::string> JobQueue::pop_startable() {
  if (waiting_.empty() || running_.size() >= max_running_) return std::nullopt;
  std::string id = std::move(waiting_.front());
  waiting_.pop_front();
  running_.insert(id);
  return id;
}

void JobQueue::finished(const std::string& id) { running_.erase(id); }

bool JobQueue::remove_waiting(const std::string& id) {
  auto it = std::find(waiting_.begin(), waiting_.end(), id);
  if (it == waiting_.end()) return false;
  waiting_.erase(it);
  return true;
}

std::vector<std::string> JobQueue::drain_waiting() {
  std::vector<std::string> all(waiting_.begin(), waiting_.end());
  waiting_.clear();
  return all;
}

std::size_t JobQueue::position(const std::string& id) const {
  auto it = std::find(waiting_.begin(), waiting_.end(), id);
  return it == waiting_.end() ? 0 : static_cast<std::size_t>(it - waiting_.begin()) + 1;
}

}  // namespace gpubox::jobs
