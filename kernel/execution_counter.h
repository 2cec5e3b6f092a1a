// The kernel's one execution count, shared by Jupyter cells and RPC cells
// (xeus 2.4.1 keeps a private counter of its own that RPC cells cannot
// advance, so the kernel's server stamps this one on execute_input and
// execute_reply). Each visible cell takes the next number; a fresh executor
// (a restart, or a crash's restart) starts again at 1, as a new ipykernel
// does. Thread-safe.
#pragma once

#include <functional>
#include <string>

#include "base/thread_annotations.h"

namespace gpubox::kernel {

class ExecutionCounter {
 public:
  // generation: the executor's restart count (PythonExecutor::restarts).
  explicit ExecutionCounter(std::function<int()> generation) : generation_(std::move(generation)) {}

  // The count of a new visible cell run over RPC.
  int next() EXCLUDES(mutex_);
  // The count of the Jupyter execute_request msg_id, which the server is about to serve.
  int assign(const std::string& msg_id) EXCLUDES(mutex_);
  // The count assigned to msg_id, or 0 when it is not the Jupyter cell being served.
  int count_of(const std::string& msg_id) const EXCLUDES(mutex_);

 private:
  int next_locked() REQUIRES(mutex_);

  std::function<int()> generation_;
  mutable Mutex mutex_;
  int last_ GUARDED_BY(mutex_) = 0;
  int generation_of_last_ GUARDED_BY(mutex_) = 0;
  std::string msg_id_ GUARDED_BY(mutex_);  // the Jupyter cell being served
  int msg_count_ GUARDED_BY(mutex_) = 0;
};

}  // namespace gpubox::kernel
