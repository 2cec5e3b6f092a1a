// GpuWork and GpuExclusive: what must not overlap a CUDA graph capture in
// this process. A capture (and the caching allocator's emptyCache, which
// asserts while any capture is under way) holds GpuExclusive; GPU work of
// other threads (a forward pass, a KV pool's allocation) holds GpuWork, so
// that no other thread allocates, frees cached blocks or syncs during a
// capture. Exclusive holders are preferred: a capture waits only for the
// passes already running. Nested holds on one thread count once; GPU work
// inside this thread's own exclusive hold (the captured step) passes freely.
#pragma once

namespace gpubox::modeld {

class GpuWork {
 public:
  explicit GpuWork(bool on_gpu);  // on the CPU: holds nothing
  ~GpuWork();
  GpuWork(const GpuWork&) = delete;
  GpuWork& operator=(const GpuWork&) = delete;

 private:
  bool held_;
};

class GpuExclusive {
 public:
  GpuExclusive();  // waits until no other thread holds GpuWork or GpuExclusive
  ~GpuExclusive();
  GpuExclusive(const GpuExclusive&) = delete;
  GpuExclusive& operator=(const GpuExclusive&) = delete;
};

}  // namespace gpubox::modeld
