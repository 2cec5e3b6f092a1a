#include "rpc/worker_pool.h"
#include "base/thread_annotations.h"

#include <pthread.h>

namespace gpubox::rpc {

WorkerPool::WorkerPool(std::size_t max_threads) : max_threads_(max_threads ? max_threads : 1) {}

WorkerPool::~WorkerPool() {
  {
    MutexLock lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& thread : threads_) thread.join();
}

void WorkerPool::submit(std::function<void()> task) {
  MutexLock lock(mutex_);
  queue_.push_back(std::move(task));
  if (idle_ < queue_.size() && threads_.size() < max_threads_) {
    threads_.emplace_back([this] { work(); });
  } else {
    wake_.notify_one();
  }
}

std::size_t WorkerPool::threads() const {
  MutexLock lock(mutex_);
  return threads_.size();
}

void WorkerPool::work() {
  ::pthread_setname_np(::pthread_self(), "rpc-worker");  // names it in top, perf and /proc/PID/task
  MutexLock lock(mutex_);
  while (true) {
    ++idle_;
    wake_.wait(lock, [this]() REQUIRES(mutex_) { return stopping_ || !queue_.empty(); });
    --idle_;
    if (queue_.empty()) return;  // stopping, and nothing left to run
    auto task = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    task();
    lock.lock();
  }
}

}  // namespace gpubox::rpc
