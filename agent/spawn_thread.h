// SpawnThread: the thread that starts every child of a process table. With a
// seccomp filter, it holds the filter and each child inherits it already
// attached: one installed in each child instead costs the kernel 0.1-0.4 ms
// per exec (it evaluates the filter for every syscall number to cache the
// answers). The rest of the agent stays unfiltered. Without a filter, it
// starts children all the same, so that both ways differ only in the filter.
// run() may be called from any thread.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <thread>

#include "agent/seccomp_filter.h"
#include "base/status.h"
#include "base/thread_annotations.h"

namespace gpubox {

class SpawnThread {
 public:
  // Starts the thread and installs program (if any) in it; an error when the kernel refuses it.
  static Result<std::unique_ptr<SpawnThread>> start(const SeccompProgram* program);
  ~SpawnThread();
  SpawnThread(const SpawnThread&) = delete;
  SpawnThread& operator=(const SpawnThread&) = delete;

  // Runs work on the filtered thread and returns once it has run. One at a time.
  void run(const std::function<void()>& work);

 private:
  SpawnThread() = default;
  void loop(const SeccompProgram* program);

  Mutex callers_;  // one run() at a time
  Mutex mutex_;
  std::condition_variable_any changed_;
  const std::function<void()>* work_ GUARDED_BY(mutex_) = nullptr;  // posted, not yet done
  bool started_ GUARDED_BY(mutex_) = false;
  int install_error_ GUARDED_BY(mutex_) = 0;
  bool stopping_ GUARDED_BY(mutex_) = false;
  std::thread thread_;
};

}  // namespace gpubox
