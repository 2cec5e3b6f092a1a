#include "base/parallel_zstd.h"
#include "base/thread_annotations.h"

#include <algorithm>
#include <cstring>
#include <memory>

namespace gpubox::jobs {
namespace {

struct CctxFree {
  void operator()(ZSTD_CCtx* cctx) const { ZSTD_freeCCtx(cctx); }
};

}  // namespace

ParallelZstd::ParallelZstd(int level, int threads, Output output, std::size_t block_bytes)
    : level_(level), block_bytes_(std::max<std::size_t>(block_bytes, 1)), output_(std::move(output)) {
  for (int i = 0; i < std::max(threads, 1); ++i) workers_.emplace_back([this] { work(); });
}

ParallelZstd::~ParallelZstd() {
  {
    MutexLock lock(mutex_);
    closing_ = true;
    if (error_.empty()) error_ = "the compressor was destroyed before finish()";
    queued_.clear();
  }
  changed_.notify_all();
  for (auto& worker : workers_) worker.join();
}

bool ParallelZstd::write(const void* data, std::size_t size) {
  const char* bytes = static_cast<const char*>(data);
  // A whole block's room at the first byte (untouched pages cost nothing), not before.
  if (size > 0 && current_.capacity() < block_bytes_) current_.reserve(block_bytes_);
  while (size > 0) {
    std::size_t take = std::min(size, block_bytes_ - current_.size());
    current_.append(bytes, take);
    bytes += take;
    size -= take;
    if (current_.size() == block_bytes_) submit_current();
  }
  MutexLock lock(mutex_);
  return error_.empty();
}

void ParallelZstd::submit_current() {
  MutexLock lock(mutex_);
  // At most two blocks per worker wait or run: memory stays bounded.
  changed_.wait(lock, [this]() REQUIRES(mutex_) {
    return !error_.empty() || queued_.size() + compressed_.size() < 2 * workers_.size();
  });
  if (error_.empty()) queued_.push_back({submitted_++, std::move(current_)});
  // A block's buffer is used again once compressed: no fresh pages to fault in.
  if (spare_.empty()) {
    current_ = std::string();
  } else {
    current_ = std::move(spare_.back());
    spare_.pop_back();
    current_.clear();
  }
  changed_.notify_all();
}

bool ParallelZstd::finish() {
  if (!current_.empty()) submit_current();
  MutexLock lock(mutex_);
  changed_.wait(lock, [this]() REQUIRES(mutex_) { return !error_.empty() || next_out_ == submitted_; });
  return error_.empty();
}

std::string ParallelZstd::error() {
  MutexLock lock(mutex_);
  return error_;
}

void ParallelZstd::fail_locked(std::string why) {
  if (error_.empty()) error_ = std::move(why);
  queued_.clear();
  compressed_.clear();
  changed_.notify_all();
}

void ParallelZstd::work() {
  std::unique_ptr<ZSTD_CCtx, CctxFree> cctx(ZSTD_createCCtx());
  // This worker's output buffer, reused for every block; never zero-filled, so
  // a small job's staging touches only the pages its frames need.
  std::size_t capacity = 0;
  std::unique_ptr<char[]> buffer;
  MutexLock lock(mutex_);
  if (!cctx) fail_locked("out of memory for a zstd context");
  while (true) {
    changed_.wait(lock, [this]() REQUIRES(mutex_) { return closing_ || !queued_.empty(); });
    if (queued_.empty()) return;
    Block block = std::move(queued_.front());
    queued_.pop_front();
    lock.unlock();
    ZSTD_CCtx_reset(cctx.get(), ZSTD_reset_session_and_parameters);
    ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_compressionLevel, level_);
    ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_checksumFlag, 1);
    if (std::size_t bound = ZSTD_compressBound(block.input.size()); bound > capacity) {
      buffer.reset(new char[bound]);
      capacity = bound;
    }
    std::size_t n = ZSTD_compress2(cctx.get(), buffer.get(), capacity, block.input.data(), block.input.size());
    std::string frame;
    if (!ZSTD_isError(n)) frame.assign(buffer.get(), n);
    lock.lock();
    if (ZSTD_isError(n)) {
      fail_locked(std::string("zstd: ") + ZSTD_getErrorName(n));
      continue;
    }
    if (spare_.size() < 2) spare_.push_back(std::move(block.input));
    if (!error_.empty()) continue;
    compressed_.emplace(block.index, std::move(frame));
    // One worker at a time hands out every frame whose turn has come.
    if (emitting_) continue;
    emitting_ = true;
    for (auto next = compressed_.find(next_out_); next != compressed_.end() && error_.empty();
         next = compressed_.find(next_out_)) {
      std::string out = std::move(next->second);
      compressed_.erase(next);
      lock.unlock();
      bool written = output_(std::move(out));
      lock.lock();
      if (!written) {
        fail_locked("the archive's output failed");
        break;
      }
      ++next_out_;
      changed_.notify_all();
    }
    emitting_ = false;
  }
}

}  // namespace gpubox::jobs
