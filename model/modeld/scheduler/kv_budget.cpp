#include "model/modeld/scheduler/kv_budget.h"

#include <algorithm>
#include <fmt/format.h>

#include "model/modeld/gpu/gpu_info.h"

namespace gpubox::modeld {
namespace {

std::uint64_t nvml_field(int device, const char* field) {
  auto gpus = gpu_info()["gpus"];
  auto index = static_cast<std::size_t>(device);
  return index < gpus.size() ? gpus[index].value(field, 0ull) : 0;
}

std::uint64_t mib(std::uint64_t bytes) { return bytes >> 20; }

}  // namespace

std::uint64_t NvmlDeviceMemory::total_bytes(int device) const { return nvml_field(device, "memory_total_bytes"); }
std::uint64_t NvmlDeviceMemory::used_bytes(int device) const { return nvml_field(device, "memory_used_bytes"); }

std::uint64_t KvBudget::Device::taken() const {
  std::uint64_t sum = 0;
  for (const auto& [ticket, member] : members) sum += member.weights.value_or(0) + member.pool.value_or(0);
  return sum;
}

std::unique_ptr<KvBudget::Share> KvBudget::join(int device, const std::string& model) {
  MutexLock lock(mutex_);
  auto [at, first] = devices_.try_emplace(device);
  Device& d = at->second;
  if (first) {  // read once: later, our own freed weights may still sit in the caching allocator
    d.total = memory_->total_bytes(device);
    d.others = std::min(memory_->used_bytes(device), d.total);
    d.margin = std::max(d.total / 10, kGiB);
  }
  std::uint64_t ticket = next_ticket_++;
  d.members[ticket] = Member{model, std::nullopt, std::nullopt};
  return std::make_unique<Share>(*this, device, ticket);
}

void KvBudget::weights_loaded(int device, std::uint64_t ticket, std::uint64_t bytes) {
  {
    MutexLock lock(mutex_);
    devices_[device].members[ticket].weights = bytes;
  }
  loaded_.notify_all();
}

Result<std::uint64_t> KvBudget::grant(int device, std::uint64_t ticket, std::optional<std::uint64_t> requested,
                                      std::uint64_t useful) {
  MutexLock lock(mutex_);
  Device& d = devices_[device];
  auto still_loading = [&d] {
    return std::any_of(d.members.begin(), d.members.end(), [](const auto& member) { return member.second.loading(); });
  };
  while (still_loading()) loaded_.wait(lock);
  Member& self = d.members[ticket];
  std::uint64_t taken = d.taken(), budget = d.budget();
  std::uint64_t left = budget > taken ? budget - taken : 0;
  auto explain = [&] {
    return fmt::format("cuda:{} has {} MiB, {} MiB used by other processes, {} MiB kept free for activations, "
                       "{} MiB taken by the models' weights and KV caches: {} MiB left",
                       device, mib(d.total), mib(d.others), mib(d.margin), mib(taken), mib(left));
  };
  if (requested) {
    if (*requested > left) {
      return Status(ErrorCode::resource_exhausted,
                    fmt::format("model \"{}\": kv_cache_mb {} MiB does not fit: {} (set kv_cache_mb to at most {})",
                                self.model, mib(*requested), explain(), mib(left)));
    }
    self.pool = *requested;
    return *requested;
  }
  std::uint64_t waiting = 0;
  for (const auto& [other, member] : d.members) waiting += member.pool ? 0 : 1;
  std::uint64_t share = std::min(left / std::max<std::uint64_t>(waiting, 1), useful);
  if (share < std::min(kSmallestPool, useful)) {
    return Status(ErrorCode::resource_exhausted,
                  fmt::format("model \"{}\": no room for a KV cache: {}, shared among {} model(s) still without one "
                              "(unload a model, or give kv_cache_mb)",
                              self.model, explain(), waiting));
  }
  self.pool = share;
  return share;
}

void KvBudget::keep(int device, std::uint64_t ticket, std::uint64_t bytes) {
  MutexLock lock(mutex_);
  Member& self = devices_[device].members[ticket];
  if (self.pool) self.pool = std::min(*self.pool, bytes);
}

void KvBudget::leave(int device, std::uint64_t ticket) {
  {
    MutexLock lock(mutex_);
    devices_[device].members.erase(ticket);
  }
  loaded_.notify_all();
}

nlohmann::json KvBudget::status() const {
  MutexLock lock(mutex_);
  nlohmann::json devices = nlohmann::json::array();
  for (const auto& [index, d] : devices_) {
    std::uint64_t weights = 0, pools = 0, taken = d.taken(), budget = d.budget();
    nlohmann::json models = nlohmann::json::array();
    for (const auto& [ticket, member] : d.members) {
      weights += member.weights.value_or(0);
      pools += member.pool.value_or(0);
      models.push_back({{"model", member.model},
                        {"weights_bytes", member.weights ? nlohmann::json(*member.weights) : nlohmann::json()},
                        {"pool_bytes", member.pool ? nlohmann::json(*member.pool) : nlohmann::json()}});
    }
    devices.push_back({{"device", fmt::format("cuda:{}", index)},
                       {"total_bytes", d.total},
                       {"others_bytes", d.others},
                       {"margin_bytes", d.margin},
                       {"weights_bytes", weights},
                       {"pools_bytes", pools},
                       {"free_bytes", budget > taken ? budget - taken : 0},
                       {"models", models}});
  }
  return {{"devices", devices}};
}

}  // namespace gpubox::modeld
