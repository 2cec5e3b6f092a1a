// LogRing: the last `capacity` bytes written to it (a worker's stdout or
// stderr), and how many were dropped before them. Thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "base/thread_annotations.h"

namespace gpubox::serve {

class LogRing {
 public:
  explicit LogRing(std::size_t capacity) : capacity_(capacity) {}

  void append(std::string_view bytes) {
    MutexLock lock(mutex_);
    if (bytes.size() >= capacity_) {
      dropped_ += text_.size() + bytes.size() - capacity_;
      text_.assign(bytes.substr(bytes.size() - capacity_));
      return;
    }
    text_.append(bytes);
    if (text_.size() > capacity_) {
      std::size_t cut = text_.size() - capacity_;
      dropped_ += cut;
      text_.erase(0, cut);
    }
  }
  // The last `bytes` bytes kept (all of them when bytes is 0 or larger).
  std::string tail(std::size_t bytes) const {
    MutexLock lock(mutex_);
    if (bytes == 0 || bytes >= text_.size()) return text_;
    return text_.substr(text_.size() - bytes);
  }
  std::size_t dropped() const {
    MutexLock lock(mutex_);
    return dropped_;
  }

 private:
  const std::size_t capacity_;
  mutable Mutex mutex_;
  std::string text_ GUARDED_BY(mutex_);
  std::size_t dropped_ GUARDED_BY(mutex_) = 0;
};

}  // namespace gpubox::serve
