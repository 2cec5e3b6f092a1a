#include "model/modeld/gpu/gpu_exclusion.h"

#include <condition_variable>

#include "base/thread_annotations.h"

namespace gpubox::modeld {
namespace {

struct Holds {
  Mutex mutex;
  std::condition_variable_any changed;
  int threads_working GUARDED_BY(mutex) = 0;  // threads holding GpuWork
  bool exclusive GUARDED_BY(mutex) = false;   // held or asked for
};

Holds& holds() {
  static Holds instance;
  return instance;
}

thread_local int work_depth = 0;          // this thread's nested GpuWork
thread_local bool exclusive_here = false;  // this thread holds GpuExclusive

}  // namespace

GpuWork::GpuWork(bool on_gpu) : held_(on_gpu && !exclusive_here) {
  if (!held_ || work_depth++ > 0) return;
  Holds& h = holds();
  MutexLock lock(h.mutex);
  while (h.exclusive) h.changed.wait(lock);
  ++h.threads_working;
}

GpuWork::~GpuWork() {
  if (!held_ || --work_depth > 0) return;
  Holds& h = holds();
  {
    MutexLock lock(h.mutex);
    --h.threads_working;
  }
  h.changed.notify_all();
}

GpuExclusive::GpuExclusive() {
  Holds& h = holds();
  MutexLock lock(h.mutex);
  while (h.exclusive) h.changed.wait(lock);
  h.exclusive = true;  // from here new GpuWork waits
  int mine = work_depth > 0 ? 1 : 0;
  while (h.threads_working > mine) h.changed.wait(lock);
  exclusive_here = true;
}

GpuExclusive::~GpuExclusive() {
  Holds& h = holds();
  {
    MutexLock lock(h.mutex);
    h.exclusive = false;
    exclusive_here = false;
  }
  h.changed.notify_all();
}

}  // namespace gpubox::modeld
