#include "model/modeld/split/rank_exchange.h"

#include <ATen/ATen.h>

namespace gpubox::modeld {

RankExchange::RankExchange(int ranks) : slots_(static_cast<std::size_t>(ranks)) {}

void RankExchange::arrive_and_wait() {
  MutexLock lock(mutex_);
  if (!failure_.empty()) throw RankFailure(failure_);
  std::int64_t generation = generation_;
  if (++waiting_ == ranks()) {
    waiting_ = 0;
    ++generation_;
    arrived_.notify_all();
    return;
  }
  while (generation_ == generation && failure_.empty()) arrived_.wait(lock);
  if (generation_ == generation) throw RankFailure(failure_);
}

void RankExchange::fail(const std::string& why) {
  MutexLock lock(mutex_);
  if (failure_.empty()) failure_ = why;
  arrived_.notify_all();
}

std::string RankExchange::failure() const {
  MutexLock lock(mutex_);
  return failure_;
}

std::vector<at::Tensor> RankExchange::all_gather(int rank, const at::Tensor& value, c10::Device device) {
  slots_[static_cast<std::size_t>(rank)] = value;
  arrive_and_wait();
  std::vector<at::Tensor> values;
  for (const auto& slot : slots_) values.push_back(slot.defined() ? slot.to(device) : slot);
  arrive_and_wait();  // every rank has read the slots before any writes them again
  slots_[static_cast<std::size_t>(rank)] = at::Tensor();
  return values;
}

std::vector<at::Tensor> RankExchange::gather(int rank, const at::Tensor& value, c10::Device device) {
  slots_[static_cast<std::size_t>(rank)] = value;
  arrive_and_wait();
  std::vector<at::Tensor> values;
  if (rank == 0) {
    for (const auto& slot : slots_) values.push_back(slot.to(device));
  }
  arrive_and_wait();
  slots_[static_cast<std::size_t>(rank)] = at::Tensor();
  return values;
}

at::Tensor RankExchange::all_reduce_sum(int rank, const at::Tensor& value, c10::Device device) {
  std::vector<at::Tensor> values = all_gather(rank, value, device);
  at::Tensor sum = values[0];
  for (std::size_t i = 1; i < values.size(); ++i) sum = sum + values[i];
  return sum;
}

at::Tensor RankExchange::broadcast(int rank, const at::Tensor& value, c10::Device device) {
  if (rank == 0) slots_[0] = value;
  arrive_and_wait();
  at::Tensor first = slots_[0].defined() ? slots_[0].to(device) : at::Tensor();
  arrive_and_wait();
  if (rank == 0) slots_[0] = at::Tensor();
  if (rank != 0 && abandoned_) throw PassAbandoned();
  return first;
}

}  // namespace gpubox::modeld
