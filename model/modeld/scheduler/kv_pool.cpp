#include "model/modeld/scheduler/kv_pool.h"

#include <ATen/ATen.h>
#include <algorithm>
#include <fstream>
#include <string>

#include "model/modeld/gpu/gpu_exclusion.h"

namespace gpubox::modeld {

std::uint64_t KvPool::bytes_per_token(const Decoder& decoder) {
  const Architecture& arch = decoder.architecture();
  std::uint64_t element = c10::elementSize(decoder.dtype());
  return 2 * static_cast<std::uint64_t>(arch.num_layers * arch.num_kv_heads * arch.head_dim) * element;
}

KvPool::KvPool(const Decoder& decoder, std::uint64_t bytes) {
  const Architecture& arch = decoder.architecture();
  head_dim_ = arch.head_dim;
  bytes_per_token_ = bytes_per_token(decoder);
  blocks_ = std::max<std::int64_t>(1, static_cast<std::int64_t>(bytes / (bytes_per_token_ * kBlockTokens)));
  auto devices = decoder.devices();
  GpuWork gpu_work(decoder.device().is_cuda());  // never during another thread's CUDA graph capture
  for (const c10::Device& device : devices) {
    RankBlocks rank;
    rank.kv_heads = arch.num_kv_heads / static_cast<std::int64_t>(devices.size());
    auto options = at::TensorOptions().dtype(decoder.dtype()).device(device);
    for (std::int64_t layer = 0; layer < arch.num_layers; ++layer) {
      rank.keys.push_back(at::empty({rank.kv_heads, blocks_ * kBlockTokens, head_dim_}, options));
      rank.values.push_back(at::empty({rank.kv_heads, blocks_ * kBlockTokens, head_dim_}, options));
    }
    ranks_.push_back(std::move(rank));
  }
}

std::int64_t KvPool::blocks_for(std::int64_t rows, std::int64_t capacity) {
  return (rows * capacity + kBlockTokens - 1) / kBlockTokens;
}

KvCache KvPool::cache_at(std::int64_t first_block, std::int64_t rows, std::int64_t capacity) const {
  std::int64_t total = blocks_ * kBlockTokens, offset = first_block * kBlockTokens * head_dim_;
  auto rank_cache = [&](const RankBlocks& rank) {
    // Row r's positions follow row r-1's: [rows, kv_heads, capacity, head_dim] over [kv_heads, tokens, head_dim].
    std::vector<std::int64_t> sizes = {rows, rank.kv_heads, capacity, head_dim_};
    std::vector<std::int64_t> strides = {capacity * head_dim_, total * head_dim_, head_dim_, 1};
    KvCache cache;
    cache.capacity = capacity;
    for (std::size_t layer = 0; layer < rank.keys.size(); ++layer) {
      cache.keys.push_back(rank.keys[layer].as_strided(sizes, strides, offset));
      cache.values.push_back(rank.values[layer].as_strided(sizes, strides, offset));
    }
    return cache;
  };
  if (ranks_.size() == 1) return rank_cache(ranks_[0]);
  KvCache cache;
  cache.capacity = capacity;
  for (const auto& rank : ranks_) cache.shards.push_back(rank_cache(rank));
  return cache;
}

namespace {

constexpr std::uint64_t kPoolMiB = 1ull << 20, kPoolGiB = 1ull << 30;

// MemAvailable of /proc/meminfo in bytes (0 when unreadable).
std::uint64_t meminfo_available_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  std::uint64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

}  // namespace

std::uint64_t default_kv_pool_bytes(const Decoder&) {
  return std::max(std::min(meminfo_available_bytes() / 4, 16 * kPoolGiB), 64 * kPoolMiB);
}

std::uint64_t useful_kv_pool_bytes(const Decoder& decoder, std::int64_t max_batch) {
  auto positions = static_cast<std::uint64_t>(std::max<std::int64_t>(max_batch, 1)) *
                   static_cast<std::uint64_t>(std::max<std::int64_t>(decoder.architecture().max_positions, 1));
  return positions * KvPool::bytes_per_token(decoder);
}

}  // namespace gpubox::modeld
