#include "agent/serve/memfd_pool.h"
#include "base/thread_annotations.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace gpubox::serve {

MemfdPool::Slot::~Slot() {
  if (data) ::munmap(data, size);
}

Result<std::shared_ptr<MemfdPool::Slot>> MemfdPool::make(std::uint64_t bytes) {
  auto slot = std::make_shared<Slot>();
  slot->fd = Fd(::memfd_create("gpubox-serve-in", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!slot->fd.valid()) return Status::from_errno(errno, "serve: memfd_create");
  struct stat info{};
  if (::fstat(slot->fd.get(), &info) != 0) return Status::from_errno(errno, "serve: fstat of a memfd");
  slot->id = {static_cast<std::uint64_t>(info.st_dev), static_cast<std::uint64_t>(info.st_ino)};
  // The worker may grow it, never shrink it under this mapping, nor seal it against our writes.
  if (::fcntl(slot->fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL) != 0) {
    return Status::from_errno(errno, "serve: sealing a memfd");
  }
  if (Status grown = grow(*slot, bytes); !grown) return grown;
  return slot;
}

Status MemfdPool::grow(Slot& slot, std::uint64_t bytes) {
  bytes = page_round(bytes);
  if (slot.data && slot.size >= bytes) return Status::ok();
  struct stat info{};
  if (::fstat(slot.fd.get(), &info) != 0) return Status::from_errno(errno, "serve: fstat of a memfd");
  // Never below the file's size (the worker may have grown it; shrinking is sealed).
  if (static_cast<std::uint64_t>(info.st_size) < bytes && ::ftruncate(slot.fd.get(), static_cast<off_t>(bytes)) != 0) {
    return Status::from_errno(errno, "serve: sizing a memfd");
  }
  void* data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, slot.fd.get(), 0);
  if (data == MAP_FAILED) return Status::from_errno(errno, "serve: mapping a memfd");
  if (slot.data) ::munmap(slot.data, slot.size);
  slot.data = static_cast<char*>(data);
  slot.size = bytes;
  return Status::ok();
}

Result<MemfdPool::Lease> MemfdPool::lend(std::uint64_t bytes) {
  MutexLock lock(mutex_);
  std::uint64_t need = page_round(bytes);
  std::uint64_t total = 0;
  std::shared_ptr<Slot> fitting, biggest;  // idle ones: the smallest that fits, the biggest
  for (const auto& slot : slots_) {
    total += slot->size;
    if (slot->lent) continue;
    if (slot->size >= need && (!fitting || slot->size < fitting->size)) fitting = slot;
    if (!biggest || slot->size > biggest->size) biggest = slot;
  }
  std::shared_ptr<Slot> best = fitting ? fitting : biggest;
  if (best && best->size < need) {
    if (total - best->size + need > kMaxPooledBytes) {
      best.reset();  // growing it would pass the pool's bytes: a one-off instead
    } else if (Status grown = grow(*best, bytes); !grown) {
      return grown;
    }
  }
  if (!best) {
    auto made = make(bytes);
    if (!made) return made.status();
    best = *made;
    if (slots_.size() < kMaxSlots && total + best->size <= kMaxPooledBytes) {
      best->pooled = true;
      slots_.push_back(best);
    }
  }
  best->lent = true;
  return Lease{best};
}

void MemfdPool::give_back(const FileId& id) {
  MutexLock lock(mutex_);
  for (const auto& slot : slots_) {
    if (slot->id == id) slot->lent = false;
  }
}

std::size_t MemfdPool::pooled() const {
  MutexLock lock(mutex_);
  return slots_.size();
}

std::size_t MemfdPool::lent() const {
  MutexLock lock(mutex_);
  std::size_t count = 0;
  for (const auto& slot : slots_) count += slot->lent ? 1 : 0;
  return count;
}

}  // namespace gpubox::serve
