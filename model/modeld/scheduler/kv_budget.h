// KvBudget: the memory each GPU gives to KV caches, split among the models on
// it by construction rather than by each model's view of "free". A model
// joins its device when its load is asked for (before any weights move),
// says how much its weights took once they are in place, and asks for its
// pool; the answer waits until no model on that device is still loading
// weights, so models loading together never race for the same bytes.
// The device's budget is its total memory, less what other processes used
// when the first model joined, less a margin for activations and everything
// else (a tenth of the device, at least 1 GiB). A pool without kv_cache_mb
// gets an equal share of what is left among the models still waiting for
// theirs, at most what the model can use (max_batch rows × its context).
// Thread-safe; models on the CPU never join (their pages are allocated lazily).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "base/thread_annotations.h"

namespace gpubox::modeld {

// What a device holds, as the budget reads it: NVML in modeld, a fake device in tests.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  virtual std::uint64_t total_bytes(int device) const = 0;
  virtual std::uint64_t used_bytes(int device) const = 0;  // by every process
};

// The machine's GPUs as NVML (or nvidia-smi) reports them (gpu_info.h).
class NvmlDeviceMemory final : public DeviceMemory {
 public:
  std::uint64_t total_bytes(int device) const override;
  std::uint64_t used_bytes(int device) const override;
};

class KvBudget {
 public:
  static constexpr std::uint64_t kMiB = 1ull << 20, kGiB = 1ull << 30;
  static constexpr std::uint64_t kSmallestPool = 64 * kMiB;  // a default pool never asks for less (when the model can use it)

  explicit KvBudget(std::shared_ptr<const DeviceMemory> memory) : memory_(std::move(memory)) {}
  KvBudget(const KvBudget&) = delete;
  KvBudget& operator=(const KvBudget&) = delete;

  class Share;
  // model joins device's budget; its share of the budget is given back when the Share is destroyed.
  std::unique_ptr<Share> join(int device, const std::string& model);

  // {"devices": [{device, total_bytes, others_bytes, margin_bytes, weights_bytes, pools_bytes, free_bytes, models}]}
  nlohmann::json status() const;

 private:
  struct Member {
    std::string model;
    std::optional<std::uint64_t> weights;  // unknown while they load
    std::optional<std::uint64_t> pool;     // unknown until granted
    bool loading() const { return !weights.has_value(); }
  };
  struct Device {
    std::uint64_t total = 0, others = 0, margin = 0;  // others: used by other processes when the first model joined
    std::map<std::uint64_t, Member> members;          // by ticket, in the order they joined
    std::uint64_t taken() const;                      // weights and pools of the members
    std::uint64_t budget() const { return total > others + margin ? total - others - margin : 0; }
  };
  void weights_loaded(int device, std::uint64_t ticket, std::uint64_t bytes);
  Result<std::uint64_t> grant(int device, std::uint64_t ticket, std::optional<std::uint64_t> requested,
                              std::uint64_t useful);
  void keep(int device, std::uint64_t ticket, std::uint64_t bytes);
  void leave(int device, std::uint64_t ticket);

  std::shared_ptr<const DeviceMemory> memory_;
  mutable Mutex mutex_;
  std::condition_variable_any loaded_;  // a member's weights are in place, or it left
  std::map<int, Device> devices_ GUARDED_BY(mutex_);
  std::uint64_t next_ticket_ GUARDED_BY(mutex_) = 1;
};

// One model's place in a device's budget, from the request to load it until it is unloaded.
class KvBudget::Share {
 public:
  Share(KvBudget& budget, int device, std::uint64_t ticket) : budget_(budget), device_(device), ticket_(ticket) {}
  ~Share() { budget_.leave(device_, ticket_); }
  Share(const Share&) = delete;
  Share& operator=(const Share&) = delete;

  // The model's weights are in place and took bytes of the device.
  void weights_loaded(std::uint64_t bytes) { budget_.weights_loaded(device_, ticket_, bytes); }
  // The pool's size: requested (kv_cache_mb) or the default share, at most useful
  // bytes; waits until no model on the device is loading weights.
  // resource_exhausted naming the numbers when the device has no room for it.
  Result<std::uint64_t> pool_bytes(std::optional<std::uint64_t> requested, std::uint64_t useful) {
    return budget_.grant(device_, ticket_, requested, useful);
  }
  // The pool took only bytes of its grant (a split model's ranks all take the smallest of
  // their devices' grants): the rest goes back to the device's budget.
  void keep(std::uint64_t bytes) { budget_.keep(device_, ticket_, bytes); }
  int device() const { return device_; }

 private:
  KvBudget& budget_;
  int device_;
  std::uint64_t ticket_;
};

}  // namespace gpubox::modeld
