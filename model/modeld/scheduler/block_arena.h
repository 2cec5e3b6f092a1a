// BlockArena: the bookkeeping of a KV cache pool of `blocks` equal blocks —
// which runs of consecutive blocks are taken, first fit, adjacent free runs
// merged when given back. No tensors (kv_pool.h holds those), so that it is
// fuzzed and tested alone. Not thread-safe: its owner serializes.
#pragma once

#include <cstdint>
#include <map>
#include <optional>

namespace gpubox::modeld {

class BlockArena {
 public:
  explicit BlockArena(std::int64_t blocks);

  // The first block of a free run of count blocks (count >= 1), now taken; none when no free run is that long.
  std::optional<std::int64_t> take(std::int64_t count);
  // Gives back a run that take() returned, whole. REQUIRES: it is taken.
  void give(std::int64_t first, std::int64_t count);

  std::int64_t blocks() const { return blocks_; }
  std::int64_t used() const { return used_; }
  std::int64_t largest_free_run() const;
  // Whether the free runs are ordered, disjoint, inside the arena, never adjacent, and sum to blocks - used (the fuzzer checks it).
  bool consistent() const;

 private:
  std::int64_t blocks_;
  std::int64_t used_ = 0;
  std::map<std::int64_t, std::int64_t> free_;  // first block -> length
};

}  // namespace gpubox::modeld
