// Admission: which waiting request of a model runs next, and what the running
// ones hold. First come first served: the head of the queue starts once the
// batch has room for its rows (max_batch; a request of more rows starts when
// the batch is empty) and the KV pool a free run of its blocks; nothing
// overtakes it. No tensors and no threads (the scheduler serializes), so it
// is fuzzed alone (tests/fuzz/fuzz_admission.cpp).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>

#include "model/modeld/scheduler/block_arena.h"

namespace gpubox::modeld {

class Admission {
 public:
  Admission(std::int64_t pool_blocks, std::int64_t max_batch, std::int64_t max_queue);

  enum class Offer { queued, queue_full, too_large };
  // Queues request id (ids are unique) of rows rows needing blocks blocks of
  // the pool (0 and 0: work that runs alone, between two steps, and holds nothing).
  Offer offer(std::uint64_t id, std::int64_t rows, std::int64_t blocks);

  struct Started {
    std::uint64_t id;
    std::int64_t first_block;  // of its run of blocks (-1 when it holds none)
  };
  // Starts the head of the queue if it fits now; none when the queue is empty or its head must wait.
  std::optional<Started> start_head();
  // Takes a waiting request off the queue (its caller left); false when it is not waiting.
  bool withdraw(std::uint64_t id);
  // A started request ended: its rows and blocks come back.
  void release(std::uint64_t id);

  std::int64_t queue_depth() const { return static_cast<std::int64_t>(queue_.size()); }
  std::int64_t running() const { return static_cast<std::int64_t>(running_.size()); }
  std::int64_t batch_rows() const { return batch_rows_; }
  const BlockArena& blocks() const { return arena_; }
  std::int64_t max_batch() const { return max_batch_; }
  std::int64_t max_queue() const { return max_queue_; }

 private:
  struct Request {
    std::uint64_t id;
    std::int64_t rows, blocks, first_block = -1;
  };
  BlockArena arena_;
  std::int64_t max_batch_, max_queue_;
  std::deque<Request> queue_;
  std::map<std::uint64_t, Request> running_;
  std::int64_t batch_rows_ = 0;
};

}  // namespace gpubox::modeld
