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
// SharedMutex is the reader-writer kind (std::shared_mutex): many readers or
// one writer. ReaderMutexLock holds it shared, WriterMutexLock exclusive; a
// member GUARDED_BY a SharedMutex may be read with either held and written
// only under the writer's; REQUIRES_SHARED(mutex_) asks a caller for at least
// the reader's. One gap: the analysis counts a call of a non-const member
// function as a read, so `cache_.emplace(...)` under a ReaderMutexLock passes:
// only assignments (and ++, --) count as writes.
//
// Header-only, for every layer.
#pragma once

#include <mutex>
#include <shared_mutex>

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
#define REQUIRES_SHARED(...) GPUBOX_THREAD_ANNOTATION(requires_shared_capability(__VA_ARGS__))
#define EXCLUDES(...) GPUBOX_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define ACQUIRE(...) GPUBOX_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RELEASE(...) GPUBOX_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define ACQUIRE_SHARED(...) GPUBOX_THREAD_ANNOTATION(acquire_shared_capability(__VA_ARGS__))
#define RELEASE_SHARED(...) GPUBOX_THREAD_ANNOTATION(release_shared_capability(__VA_ARGS__))
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

// A std::shared_mutex the analysis knows as a capability that can be held
// shared (readers) or exclusive (a writer). Not recursive, not upgradable.
class CAPABILITY("mutex") SharedMutex {
 public:
  SharedMutex() = default;
  SharedMutex(const SharedMutex&) = delete;
  SharedMutex& operator=(const SharedMutex&) = delete;

  void lock() ACQUIRE() { mutex_.lock(); }
  void unlock() RELEASE() { mutex_.unlock(); }
  void lock_shared() ACQUIRE_SHARED() { mutex_.lock_shared(); }
  void unlock_shared() RELEASE_SHARED() { mutex_.unlock_shared(); }

 private:
  std::shared_mutex mutex_;
};

// Holds a SharedMutex shared (as a reader) for its scope.
class SCOPED_CAPABILITY ReaderMutexLock {
 public:
  explicit ReaderMutexLock(SharedMutex& mutex) ACQUIRE_SHARED(mutex) : mutex_(mutex) { mutex_.lock_shared(); }
  ~ReaderMutexLock() RELEASE() { mutex_.unlock_shared(); }
  ReaderMutexLock(const ReaderMutexLock&) = delete;
  ReaderMutexLock& operator=(const ReaderMutexLock&) = delete;

 private:
  SharedMutex& mutex_;
};

// Holds a SharedMutex exclusive (as the one writer) for its scope.
class SCOPED_CAPABILITY WriterMutexLock {
 public:
  explicit WriterMutexLock(SharedMutex& mutex) ACQUIRE(mutex) : mutex_(mutex) { mutex_.lock(); }
  ~WriterMutexLock() RELEASE() { mutex_.unlock(); }
  WriterMutexLock(const WriterMutexLock&) = delete;
  WriterMutexLock& operator=(const WriterMutexLock&) = delete;

 private:
  SharedMutex& mutex_;
};

}  // namespace gpubox
