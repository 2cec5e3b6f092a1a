// WorkerPool: runs submitted tasks on up to max_threads threads, starting a
// thread only when every existing one is busy; tasks beyond that wait in FIFO
// order. submit() may be called from any thread; the destructor waits for
// every submitted task to finish.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "base/thread_annotations.h"

namespace gpubox::rpc {

class WorkerPool {
 public:
  explicit WorkerPool(std::size_t max_threads);
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;
  ~WorkerPool();

  void submit(std::function<void()> task);
  std::size_t threads() const;

 private:
  void work() EXCLUDES(mutex_);

  const std::size_t max_threads_;
  mutable Mutex mutex_;
  std::condition_variable_any wake_;
  std::deque<std::function<void()>> queue_ GUARDED_BY(mutex_);
  std::vector<std::thread> threads_ GUARDED_BY(mutex_);
  std::size_t idle_ GUARDED_BY(mutex_) = 0;
  bool stopping_ GUARDED_BY(mutex_) = false;
};

}  // namespace gpubox::rpc
