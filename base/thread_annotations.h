// Lock rules the compiler checks: Clang's thread-safety analysis
// (-Wthread-safety, an error in the clang builds: cmake/ThreadSafety.cmake).
// A member written `T x_ GUARDED_BY(mutex_);` may be touched only with mutex_
// held; a function marked REQUIRES(mutex_) may be called only with it held,
// EXCLUDES(mutex_) only without. The macros are empty under other compilers.
//
// Mutex and MutexLock exist because libstdc++'s std::mutex and lock_guard
// carry no annotations, so the analysis cannot see them lock anything. A
// condition variable waits on a MutexLock: std::condition_variable_any, whose
// wait() releases and retakes the lock inside the library, where the analysis
// does not look (the caller holds the lock before and after, which is what it
// checks). A wait's predicate is a separate function to the analysis: write
// the loop out (`while (!ready_) changed_.wait(lock);`) or mark the lambda
// REQUIRES(mutex_).
//
// Header-only, for every layer.
#pragma once

#include <mutex>

#if defined(__clang__)
#define GPUBOX_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define GPUBOX_THREAD_ANNOTATION(x)
#endif

#define CAPABILITY(name) GPUBOX_THREAD_ANNOTATION(capability(name))
#define SCOPED_CAPABILITY GPUBOX_THREAD_ANNOTATION(scoped_lockable)
#define GUARDED_BY(x) GPUBOX_THREAD_ANNOTATION(guarded_by(x))
#define PT_GUARDED_BY(x) GPUBOX_THREAD_ANNOTATION(pt_guarded_by(x))
#define REQUIRES(...) GPUBOX_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define EXCLUDES(...) GPUBOX_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define ACQUIRE(...) GPUBOX_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RELEASE(...) GPUBOX_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) GPUBOX_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define RETURN_CAPABILITY(x) GPUBOX_THREAD_ANNOTATION(lock_returned(x))
#define NO_THREAD_SAFETY_ANALYSIS GPUBOX_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace gpubox {

// A std::mutex the analysis knows as a capability. Not recursive.
class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() ACQUIRE() { mutex_.lock(); }
  void unlock() RELEASE() { mutex_.unlock(); }
  bool try_lock() TRY_ACQUIRE(true) { return mutex_.try_lock(); }

 private:
  std::mutex mutex_;
};

// Holds a Mutex for its scope, like std::unique_lock: unlock() and lock() let
// a scope let go for a while (and condition_variable_any wait on it); the
// destructor releases only what is still held.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mutex) ACQUIRE(mutex) : mutex_(mutex) { mutex_.lock(); }
  // Takes over a mutex the caller already holds (after its try_lock()).
  MutexLock(Mutex& mutex, std::adopt_lock_t) REQUIRES(mutex) : mutex_(mutex) {}
  ~MutexLock() RELEASE() {
    if (locked_) mutex_.unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void lock() ACQUIRE() {
    mutex_.lock();
    locked_ = true;
  }
  void unlock() RELEASE() {
    locked_ = false;
    mutex_.unlock();
  }

 private:
  Mutex& mutex_;
  bool locked_ = true;
};

}  // namespace gpubox
