// MemfdPool: the memfds the agent writes a worker's large attachments into,
// kept warm between calls. Each is lent to one message and comes back when
// the worker reports ("released") that its mapping of it is gone, so a
// tensor's bytes land in pages that are already allocated and mapped instead
// of fresh ones (a fresh 64 MiB memfd costs about twice the copy itself).
// Every memfd is mapped here and sealed against shrinking (and further
// seals) before the worker sees it: nothing the worker does to it can fault
// the agent. When the pool is full (the worker keeps tensors it was passed),
// a one-off memfd is lent and dropped after its send. Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "agent/serve/worker_wire.h"
#include "base/fd.h"
#include "base/status.h"
#include "base/thread_annotations.h"

namespace gpubox::serve {

class MemfdPool {
 public:
  static constexpr std::size_t kMaxSlots = 4;                     // pooled memfds, lent or idle
  static constexpr std::uint64_t kMaxPooledBytes = 512ull << 20;  // their sizes together

  // One memfd, mapped shared and writable here.
  struct Slot {
    Slot() = default;
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;
    ~Slot();
    Fd fd;
    char* data = nullptr;
    std::uint64_t size = 0;
    FileId id;
    bool pooled = false;
    bool lent = false;  // guarded by the pool's mutex
  };
  // What write_message fills; the slot stays mapped while the lease lives.
  struct Lease {
    std::shared_ptr<Slot> slot;
    MemfdTarget target() const { return {slot->fd.get(), slot->data}; }
  };

  MemfdPool() = default;
  MemfdPool(const MemfdPool&) = delete;
  MemfdPool& operator=(const MemfdPool&) = delete;

  // A memfd at least bytes long: an idle pooled one (grown if needed), a new
  // pooled one while there is room, else a one-off.
  Result<Lease> lend(std::uint64_t bytes);
  // The worker has unmapped the memfd id: it may be lent again. Unknown ids are ignored.
  void give_back(const FileId& id);
  // Pooled memfds (lent or idle), and those lent now.
  std::size_t pooled() const;
  std::size_t lent() const;

 private:
  static Result<std::shared_ptr<Slot>> make(std::uint64_t bytes);
  static Status grow(Slot& slot, std::uint64_t bytes);

  mutable Mutex mutex_;
  std::vector<std::shared_ptr<Slot>> slots_ GUARDED_BY(mutex_);
};

}  // namespace gpubox::serve
