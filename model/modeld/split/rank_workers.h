// RankWorkers: the threads of a split model's ranks beyond the first, one
// each; run() runs one piece of work on every rank at once, rank 0 on the
// calling thread (where the request's hooks and autograd live), and returns
// when every rank has finished.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <thread>
#include <vector>

#include "base/thread_annotations.h"

namespace gpubox::modeld {

class RankWorkers {
 public:
  explicit RankWorkers(int ranks);
  ~RankWorkers();  // finishes the threads (no run() may be in progress)
  RankWorkers(const RankWorkers&) = delete;
  RankWorkers& operator=(const RankWorkers&) = delete;

  // work(rank) on every rank concurrently; one run at a time. Rethrows rank
  // 0's exception if it threw, else the lowest other rank's.
  void run(const std::function<void(int rank)>& work);

 private:
  void serve(int rank);

  Mutex mutex_;
  std::condition_variable_any changed_;
  const std::function<void(int)>* work_ GUARDED_BY(mutex_) = nullptr;
  std::int64_t round_ GUARDED_BY(mutex_) = 0;
  int finished_ GUARDED_BY(mutex_) = 0;
  bool stopping_ GUARDED_BY(mutex_) = false;
  std::vector<std::exception_ptr> errors_;  // by rank; written by each rank before it counts itself finished
  std::vector<std::thread> threads_;
};

}  // namespace gpubox::modeld
