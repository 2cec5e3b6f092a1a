// KvPool: one model's KV cache, allocated once at load: per layer a key and a
// value tensor [kv_heads, tokens, head_dim], handed out in blocks of
// kBlockTokens positions. A request takes one run of blocks for all its rows
// (rows × capacity positions) and sees it as a KvCache of
// [rows, kv_heads, capacity, head_dim] views; the run comes back when its
// lease ends. The same views serve dynamic steps and the static steps a CUDA
// graph replays (their addresses never move). Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "base/thread_annotations.h"
#include "model/modeld/block_arena.h"
#include "model/modeld/decoder.h"

namespace gpubox::modeld {

class KvPool {
 public:
  static constexpr std::int64_t kBlockTokens = 16;

  // A KvCache in the pool; its blocks go back when the lease is destroyed.
  class Lease {
   public:
    Lease(Lease&& other) noexcept;
    Lease& operator=(Lease&&) = delete;
    Lease(const Lease&) = delete;
    ~Lease();
    KvCache& cache() { return cache_; }

   private:
    friend class KvPool;
    Lease(KvPool* pool, std::int64_t first_block, std::int64_t blocks) : pool_(pool), first_(first_block), blocks_(blocks) {}
    KvPool* pool_;
    std::int64_t first_, blocks_;
    KvCache cache_;
  };

  // bytes: the pool's size (whole blocks of it are allocated, at least one).
  KvPool(const Decoder& decoder, std::uint64_t bytes);
  KvPool(const KvPool&) = delete;
  KvPool& operator=(const KvPool&) = delete;

  // Blocks a cache of rows × capacity positions takes.
  static std::int64_t blocks_for(std::int64_t rows, std::int64_t capacity);
  // A cache of rows × capacity positions, or none while no free run is that long.
  // zeroed: its positions hold 0 (a static step reads them all, masked).
  std::optional<Lease> take(std::int64_t rows, std::int64_t capacity, bool zeroed = false);

  std::int64_t blocks() const { return blocks_; }
  std::uint64_t bytes_per_token() const { return bytes_per_token_; }
  // {block_tokens, blocks, blocks_used, blocks_free, largest_free_run, bytes}
  nlohmann::json stats() const;

 private:
  void give(std::int64_t first_block, std::int64_t blocks);

  std::uint64_t bytes_per_token_;
  std::int64_t blocks_;
  std::int64_t kv_heads_, head_dim_;
  std::vector<at::Tensor> keys_, values_;  // per layer [kv_heads, blocks * kBlockTokens, head_dim]
  mutable Mutex mutex_;
  BlockArena arena_ GUARDED_BY(mutex_);
};

// The pool size a model gets without kv_cache_mb: on a GPU what is free after
// its weights less a margin (a tenth of the device's memory, at least 1 GiB);
// on the CPU a quarter of the memory available (/proc/meminfo), at most 16 GiB
// (the CPU allocates pages only as positions are written). At least 64 MiB.
std::uint64_t default_kv_pool_bytes(const Decoder& decoder);

}  // namespace gpubox::modeld
