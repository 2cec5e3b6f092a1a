#include "model/modeld/split/rank_workers.h"

namespace gpubox::modeld {

RankWorkers::RankWorkers(int ranks) : errors_(static_cast<std::size_t>(ranks)) {
  for (int rank = 1; rank < ranks; ++rank) threads_.emplace_back([this, rank] { serve(rank); });
}

RankWorkers::~RankWorkers() {
  {
    MutexLock lock(mutex_);
    stopping_ = true;
    changed_.notify_all();
  }
  for (auto& thread : threads_) thread.join();
}

void RankWorkers::serve(int rank) {
  std::int64_t served = 0;
  while (true) {
    const std::function<void(int)>* work = nullptr;
    {
      MutexLock lock(mutex_);
      while (!stopping_ && round_ == served) changed_.wait(lock);
      if (stopping_) return;
      served = round_;
      work = work_;
    }
    try {
      (*work)(rank);
    } catch (...) {
      errors_[static_cast<std::size_t>(rank)] = std::current_exception();
    }
    MutexLock lock(mutex_);
    ++finished_;
    changed_.notify_all();
  }
}

void RankWorkers::run(const std::function<void(int rank)>& work) {
  for (auto& error : errors_) error = nullptr;
  {
    MutexLock lock(mutex_);
    work_ = &work;
    finished_ = 0;
    ++round_;
    changed_.notify_all();
  }
  try {
    work(0);
  } catch (...) {
    errors_[0] = std::current_exception();
  }
  {
    MutexLock lock(mutex_);
    while (finished_ < static_cast<int>(threads_.size())) changed_.wait(lock);
    work_ = nullptr;
  }
  for (const auto& error : errors_) {
    if (error) std::rethrow_exception(error);
  }
}

}  // namespace gpubox::modeld
