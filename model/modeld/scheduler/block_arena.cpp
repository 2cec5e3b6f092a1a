#include "model/modeld/scheduler/block_arena.h"

#include <algorithm>
#include <cstdlib>

namespace gpubox::modeld {

BlockArena::BlockArena(std::int64_t blocks) : blocks_(std::max<std::int64_t>(blocks, 0)) {
  if (blocks_ > 0) free_[0] = blocks_;
}

std::optional<std::int64_t> BlockArena::take(std::int64_t count) {
  if (count < 1) return std::nullopt;
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < count) continue;
    std::int64_t first = it->first, left = it->second - count;
    free_.erase(it);
    if (left > 0) free_[first + count] = left;
    used_ += count;
    return first;
  }
  return std::nullopt;
}

void BlockArena::give(std::int64_t first, std::int64_t count) {
  if (count < 1 || first < 0 || first + count > blocks_) std::abort();  // not a run take() returned
  std::int64_t start = first, length = count;
  auto next = free_.lower_bound(first);
  if (next != free_.end() && next->first < first + count) std::abort();  // overlaps a free run: given twice
  if (next != free_.begin()) {
    auto previous = std::prev(next);
    if (previous->first + previous->second > first) std::abort();
    if (previous->first + previous->second == first) {
      start = previous->first;
      length += previous->second;
      free_.erase(previous);
    }
  }
  if (next != free_.end() && next->first == first + count) {
    length += next->second;
    free_.erase(next);
  }
  free_[start] = length;
  used_ -= count;
}

std::int64_t BlockArena::largest_free_run() const {
  std::int64_t largest = 0;
  for (const auto& [first, length] : free_) largest = std::max(largest, length);
  return largest;
}

bool BlockArena::consistent() const {
  std::int64_t free_total = 0, end = -1;
  for (const auto& [first, length] : free_) {
    if (length < 1 || first < 0 || first + length > blocks_) return false;
    if (first <= end) return false;  // overlapping, or adjacent (those are merged)
    end = first + length;
    free_total += length;
  }
  return free_total == blocks_ - used_;
}

}  // namespace gpubox::modeld
