#include "model/modeld/interventions/fn_runner.h"

#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <fmt/format.h>
#include <thread>

#include "base/thread_annotations.h"

namespace gpubox::modeld {
namespace {

std::atomic<std::int64_t> abandoned_count{0};
constexpr std::chrono::milliseconds kPoll{10};

}  // namespace

struct FnRunner::Worker {
  Mutex mutex;
  std::condition_variable_any changed;
  std::function<void()> task GUARDED_BY(mutex);
  bool running GUARDED_BY(mutex) = false;  // a task was given and has not ended
  bool quit GUARDED_BY(mutex) = false;     // no more tasks: end when idle
  bool abandoned GUARDED_BY(mutex) = false;
  pid_t tid GUARDED_BY(mutex) = 0;

  // The thread's life: tasks one at a time until told to quit, or until its task was abandoned.
  static void serve(std::shared_ptr<Worker> self) {
    MutexLock lock(self->mutex);
    self->tid = static_cast<pid_t>(::gettid());
    self->changed.notify_all();
    while (true) {
      while (!self->running && !self->quit) self->changed.wait(lock);
      if (!self->running) return;
      std::function<void()> task = std::move(self->task);
      lock.unlock();
      task();
      task = nullptr;  // what the work held goes now, not when the next task comes
      lock.lock();
      self->running = false;
      self->changed.notify_all();
      if (self->abandoned) {
        --abandoned_count;
        return;
      }
    }
  }
};

FnRunner::~FnRunner() {
  if (!worker_) return;
  {
    MutexLock lock(worker_->mutex);
    worker_->quit = true;
  }
  worker_->changed.notify_all();
}

Status FnRunner::run(std::function<void()> work, const std::function<Status()>& stop, std::chrono::milliseconds limit) {
  if (!worker_) {
    worker_ = std::make_shared<Worker>();
    std::thread(Worker::serve, worker_).detach();
  }
  Worker& worker = *worker_;
  auto started = std::chrono::steady_clock::now();
  {
    MutexLock lock(worker.mutex);
    worker.task = std::move(work);
    worker.running = true;
  }
  worker.changed.notify_all();
  Status why;
  while (true) {
    {
      MutexLock lock(worker.mutex);
      worker.changed.wait_for(lock, kPoll);
      if (!worker.running) return Status::ok();
    }
    auto ran = std::chrono::steady_clock::now() - started;
    if (stop) why = stop();
    if (why && ran > limit) {
      why = Status(ErrorCode::deadline_exceeded,
                   fmt::format("one function call may run {} s", std::chrono::duration<double>(limit).count()));
    }
    if (!why) break;
  }
  {
    MutexLock lock(worker.mutex);
    if (!worker.running) return Status::ok();  // it ended just now
    worker.abandoned = true;
    ++abandoned_count;
    ::setpriority(PRIO_PROCESS, static_cast<id_t>(worker.tid), 19);  // the least CPU from now on
  }
  worker_.reset();  // the next call starts a fresh thread
  return why;
}

std::int64_t FnRunner::abandoned_running() { return abandoned_count.load(); }

}  // namespace gpubox::modeld
