// KvPool: one model's KV cache, allocated once at load: per layer a key and a
// value tensor [kv_heads, tokens, head_dim], in blocks of kBlockTokens
// positions. A request's rows take one run of blocks (which run: Admission,
// admission.h) and see it as a KvCache of [rows, kv_heads, capacity, head_dim]
// views, row after row, whose addresses never move (what a CUDA graph
// replays: static steps take their cache from here too). A split model's pool
// is one such set per rank, of its KV heads on its device, the same blocks in
// each. Immutable after construction.
#pragma once

#include <cstdint>
#include <vector>

#include "model/modeld/decoder/decoder.h"

namespace gpubox::modeld {

class KvPool {
 public:
  static constexpr std::int64_t kBlockTokens = 16;

  // Bytes a position takes in every layer's keys and values.
  static std::uint64_t bytes_per_token(const Decoder& decoder);
  // bytes: the pool's size (whole blocks of it are allocated, at least one).
  KvPool(const Decoder& decoder, std::uint64_t bytes);
  KvPool(const KvPool&) = delete;
  KvPool& operator=(const KvPool&) = delete;

  // Blocks a cache of rows × capacity positions takes.
  static std::int64_t blocks_for(std::int64_t rows, std::int64_t capacity);
  // The cache of rows × capacity positions on the run of blocks from first_block (blocks_for() of them).
  KvCache cache_at(std::int64_t first_block, std::int64_t rows, std::int64_t capacity) const;

  std::int64_t blocks() const { return blocks_; }
  std::int64_t tokens() const { return blocks_ * kBlockTokens; }
  std::uint64_t bytes() const { return static_cast<std::uint64_t>(blocks_ * kBlockTokens) * bytes_per_token_; }

 private:
  std::uint64_t bytes_per_token_;
  std::int64_t blocks_;
  std::int64_t head_dim_;
  // One per rank (one rank when the model is not split).
  struct RankBlocks {
    std::int64_t kv_heads = 0;
    std::vector<at::Tensor> keys, values;  // per layer [kv_heads, blocks * kBlockTokens, head_dim]
  };
  std::vector<RankBlocks> ranks_;
};

// The pool size a CPU model gets without kv_cache_mb: a quarter of the memory
// available (/proc/meminfo), at most 16 GiB (the CPU allocates pages only as
// positions are written), at least 64 MiB. A GPU model's comes from its
// device's KvBudget (kv_budget.h).
std::uint64_t default_kv_pool_bytes(const Decoder& decoder);

// The most a pool can be used: max_batch rows, each as long as the model's context.
std::uint64_t useful_kv_pool_bytes(const Decoder& decoder, std::int64_t max_batch);

}  // namespace gpubox::modeld
