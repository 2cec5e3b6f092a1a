#include "model/modeld/scheduler/admission.h"

#include <algorithm>

namespace gpubox::modeld {

Admission::Admission(std::int64_t pool_blocks, std::int64_t max_batch, std::int64_t max_queue)
    : arena_(pool_blocks), max_batch_(max_batch), max_queue_(max_queue) {}

Admission::Offer Admission::offer(std::uint64_t id, std::int64_t rows, std::int64_t blocks) {
  if (blocks > arena_.blocks()) return Offer::too_large;
  if (queue_depth() >= max_queue_) return Offer::queue_full;
  queue_.push_back({id, rows, blocks});
  return Offer::queued;
}

std::optional<Admission::Started> Admission::start_head() {
  if (queue_.empty()) return std::nullopt;
  Request head = queue_.front();
  if (head.rows > 0 && !running_.empty() && batch_rows_ + head.rows > max_batch_) return std::nullopt;
  if (head.blocks > 0) {
    auto first = arena_.take(head.blocks);
    if (!first) return std::nullopt;
    head.first_block = *first;
  }
  queue_.pop_front();
  running_[head.id] = head;
  batch_rows_ += head.rows;
  return Started{head.id, head.first_block};
}

bool Admission::withdraw(std::uint64_t id) {
  auto waiting = std::find_if(queue_.begin(), queue_.end(), [&](const Request& r) { return r.id == id; });
  if (waiting == queue_.end()) return false;
  queue_.erase(waiting);
  return true;
}

void Admission::release(std::uint64_t id) {
  auto started = running_.find(id);
  if (started == running_.end()) return;
  if (started->second.blocks > 0) arena_.give(started->second.first_block, started->second.blocks);
  batch_rows_ -= started->second.rows;
  running_.erase(started);
}

}  // namespace gpubox::modeld
