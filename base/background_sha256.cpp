#include "base/background_sha256.h"
#include "base/thread_annotations.h"

#include <pthread.h>

namespace gpubox {

BackgroundSha256::BackgroundSha256(std::size_t max_queued) : max_queued_(max_queued ? max_queued : 1) {}

BackgroundSha256::~BackgroundSha256() {
  if (!thread_.joinable()) return;
  {
    MutexLock lock(mutex_);
    closing_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void BackgroundSha256::update(std::shared_ptr<const void> owner, const void* data, std::size_t size) {
  if (size == 0) return;
  if (!thread_.joinable()) {
    if (size < kInlineBytes) {
      hash_.update(data, size);  // nothing is queued: the order is kept
      return;
    }
    thread_ = std::thread([this] { run(); });
  }
  {
    MutexLock lock(mutex_);
    changed_.wait(lock, [&]() REQUIRES(mutex_) { return queue_.size() < max_queued_; });
    queue_.push_back(Piece{std::move(owner), data, size});
  }
  changed_.notify_all();
}

std::string BackgroundSha256::hex_digest() {
  if (!thread_.joinable()) return hash_.hex_digest();
  MutexLock lock(mutex_);
  changed_.wait(lock, [&]() REQUIRES(mutex_) { return queue_.empty() && !hashing_; });
  return hash_.hex_digest();  // the hasher is idle until more is queued
}

void BackgroundSha256::run() {
  ::pthread_setname_np(::pthread_self(), "sha256");
  MutexLock lock(mutex_);
  while (true) {
    changed_.wait(lock, [&]() REQUIRES(mutex_) { return closing_ || !queue_.empty(); });
    if (queue_.empty()) return;  // closing, and nothing left
    Piece piece = std::move(queue_.front());
    queue_.pop_front();
    hashing_ = true;
    lock.unlock();
    changed_.notify_all();  // room in the queue
    hash_.update(piece.data, piece.size);
    piece.owner.reset();
    lock.lock();
    hashing_ = false;
    changed_.notify_all();  // hex_digest() may be waiting
  }
}

}  // namespace gpubox
