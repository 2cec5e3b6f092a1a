// ParallelZstd: compresses a byte stream on several threads as a series of
// independent zstd frames, one per block of input, and hands the frames to its
// output in input order. Concatenated frames are one valid zstd stream (RFC
// 8878, section 3.1), so any zstd reader decodes them as the whole. Debian's
// static libzstd is built without its own worker threads, hence this.
// write() and finish() belong to one thread; the output runs on the workers,
// one frame at a time.
#pragma once

#include <zstd.h>

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "base/thread_annotations.h"

namespace gpubox::jobs {

class ParallelZstd {
 public:
  // Takes one compressed frame; returns false to stop (a failed write).
  using Output = std::function<bool(std::string frame)>;

  ParallelZstd(int level, int threads, Output output, std::size_t block_bytes = 4 << 20);
  ~ParallelZstd();
  ParallelZstd(const ParallelZstd&) = delete;
  ParallelZstd& operator=(const ParallelZstd&) = delete;

  // Buffers the bytes; a full block goes to the workers. False once the output
  // or a compression has failed (error() says why).
  bool write(const void* data, std::size_t size);
  // Compresses what is buffered and waits until every frame is out; false on failure.
  bool finish();
  std::string error();

 private:
  struct Block {
    std::size_t index;
    std::string input;
  };
  void submit_current();
  void work();
  void fail_locked(std::string why) REQUIRES(mutex_);

  const int level_;
  const std::size_t block_bytes_;
  Output output_;
  std::string current_;  // the block being filled (caller's thread)
  std::size_t submitted_ = 0;

  Mutex mutex_;
  std::condition_variable_any changed_;
  std::deque<Block> queued_ GUARDED_BY(mutex_);
  std::map<std::size_t, std::string> compressed_ GUARDED_BY(mutex_);  // done, waiting for their turn
  std::vector<std::string> spare_ GUARDED_BY(mutex_);                 // input buffers to fill again
  std::size_t next_out_ GUARDED_BY(mutex_) = 0;  // index of the next frame to hand out
  bool emitting_ GUARDED_BY(mutex_) = false;     // a worker is handing frames out
  bool closing_ GUARDED_BY(mutex_) = false;
  std::string error_ GUARDED_BY(mutex_);
  std::vector<std::thread> workers_;  // last: start once the members above exist
};

}  // namespace gpubox::jobs
