#include "kernel/execution_counter.h"

namespace gpubox::kernel {

int ExecutionCounter::next_locked() {
  int generation = generation_ ? generation_() : 0;
  if (generation != generation_of_last_) {
    generation_of_last_ = generation;
    last_ = 0;
  }
  return ++last_;
}

int ExecutionCounter::next() {
  MutexLock lock(mutex_);
  return next_locked();
}

int ExecutionCounter::assign(const std::string& msg_id) {
  MutexLock lock(mutex_);
  msg_id_ = msg_id;
  msg_count_ = next_locked();
  return msg_count_;
}

int ExecutionCounter::count_of(const std::string& msg_id) const {
  MutexLock lock(mutex_);
  return !msg_id.empty() && msg_id == msg_id_ ? msg_count_ : 0;
}

}  // namespace gpubox::kernel
