#include "agent/spawn_thread.h"
#include "base/thread_annotations.h"

namespace gpubox {

Result<std::unique_ptr<SpawnThread>> SpawnThread::start(const SeccompProgram* program) {
  std::unique_ptr<SpawnThread> spawner(new SpawnThread());
  SpawnThread* self = spawner.get();
  self->thread_ = std::thread([self, program] { self->loop(program); });
  MutexLock lock(self->mutex_);
  self->changed_.wait(lock, [self]() REQUIRES(self->mutex_) { return self->started_; });
  if (int err = self->install_error_; err != 0) return Status::from_errno(err, "seccomp filter: the kernel refused it");
  return spawner;
}

SpawnThread::~SpawnThread() {
  {
    MutexLock lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void SpawnThread::run(const std::function<void()>& work) {
  MutexLock caller(callers_);
  MutexLock lock(mutex_);
  work_ = &work;
  changed_.notify_all();
  changed_.wait(lock, [this]() REQUIRES(mutex_) { return work_ == nullptr; });
}

void SpawnThread::loop(const SeccompProgram* program) {
  int err = 0;
  if (program) {
    sock_fprog view = program->view();
    err = install_seccomp_program(&view);
  }
  MutexLock lock(mutex_);
  started_ = true;
  install_error_ = err;
  stopping_ = stopping_ || err != 0;
  changed_.notify_all();
  while (true) {
    changed_.wait(lock, [this]() REQUIRES(mutex_) { return stopping_ || work_ != nullptr; });
    if (stopping_) return;
    (*work_)();
    work_ = nullptr;
    changed_.notify_all();
  }
}

}  // namespace gpubox
