// RankGroup: the collectives of one split model's ranks, which are threads of
// this process, one per device: LibTorch's c10d, Gloo between CPU ranks (the
// torch wheel's libtorch_cpu has it inside), NCCL between GPU ranks (the
// wheel's libtorch_cuda, reached through libgpubox_nccl_ranks.so, loaded only
// when a model is split across GPUs). The decoder's hot path, one all-reduce
// after attention and one after the MLP, goes through it; everything else the
// ranks share goes through memory (rank_exchange.h).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <chrono>
#include <memory>
#include <vector>

#include "base/status.h"

namespace gpubox::modeld {

// One rank's end of the group. Every rank calls the same collectives in the
// same order, each on its own thread; a collective that does not complete
// within the group's timeout (a rank that died) throws c10::Error.
class RankCollectives {
 public:
  virtual ~RankCollectives() = default;
  // Replaces t (contiguous, on this rank's device) by the sum of every rank's t, in place.
  virtual void all_reduce_sum(at::Tensor& t) = 0;
};

// Connects one rank per device (all CPU, or all CUDA and distinct), the ranks
// in the order given; returns each rank's end, index = rank. Blocks until
// every rank has joined (the constructors rendezvous through an in-process
// c10d::HashStore, each on a thread of its own). An error names the backend
// and why: NCCL's library missing ("libnccl.so.2 cannot be loaded: ..."), a
// device that does not exist, a Gloo device that cannot bind 127.0.0.1.
Result<std::vector<std::unique_ptr<RankCollectives>>> connect_ranks(const std::vector<c10::Device>& devices,
                                                                  std::chrono::milliseconds timeout);

}  // namespace gpubox::modeld
