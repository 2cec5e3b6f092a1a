// BackgroundSha256: a SHA-256 computed on its own thread, so that hashing a
// stream overlaps what the caller does with the same bytes (writing them to
// a file): on two cores the slower of the two bounds the stream, not their
// sum. Buffers are shared, never copied: each stays alive (through its owner)
// until it is hashed. One thread feeds it; hex_digest() waits for the rest.
// The hasher thread starts with the first piece of kInlineBytes or more;
// smaller pieces before it are hashed on the caller's thread, so a small
// stream costs no thread.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <string>
#include <thread>

#include "base/sha256.h"
#include "base/thread_annotations.h"

namespace gpubox {

class BackgroundSha256 {
 public:
  static constexpr std::size_t kInlineBytes = 64 << 10;

  // At most max_queued buffers wait to be hashed; update() waits beyond that,
  // so memory stays bounded when the hasher is the slower side.
  explicit BackgroundSha256(std::size_t max_queued = 16);
  ~BackgroundSha256();
  BackgroundSha256(const BackgroundSha256&) = delete;
  BackgroundSha256& operator=(const BackgroundSha256&) = delete;

  // Queues size bytes at data, which must stay unchanged while owner lives
  // (the hasher holds owner until it has hashed them).
  void update(std::shared_ptr<const void> owner, const void* data, std::size_t size);
  // Lower-case hex of the digest of everything queued, once it is hashed; call once.
  std::string hex_digest();

 private:
  struct Piece {
    std::shared_ptr<const void> owner;
    const void* data;
    std::size_t size;
  };
  void run();

  const std::size_t max_queued_;
  Sha256 hash_;  // the caller's until the hasher thread starts, then that thread's
  Mutex mutex_;
  std::condition_variable_any changed_;
  std::deque<Piece> queue_ GUARDED_BY(mutex_);
  bool hashing_ GUARDED_BY(mutex_) = false;  // the hasher holds a piece outside the queue
  bool closing_ GUARDED_BY(mutex_) = false;
  std::thread thread_;  // started by the first large piece; only the feeding thread starts it
};

}  // namespace gpubox
