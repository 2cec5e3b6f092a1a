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
#include <functional>
#include <memory>
#include <vector>

#include "base/status.h"

namespace gpubox::modeld {

// One rank's end of the group, used by that rank's thread only. Every rank
// calls the same collectives in the same order, each on its own thread. Over
// Gloo a collective that does not complete within the group's timeout (a
// rank that died or never came) throws c10::Error, and the group is broken.
// Over NCCL a collective is queued on NCCL's stream and the caller's current
// stream waits for it, not the host: c10d's watchdog acts on one that misses
// the timeout (by default, TORCH_NCCL_ASYNC_ERROR_HANDLING=3, it ends the
// process); a bad tensor still throws c10::Error at once.
class RankCollectives {
 public:
  virtual ~RankCollectives() = default;
  // Replaces t (contiguous, on this rank's device) by the sum of every rank's t, in place.
  void all_reduce_sum(at::Tensor& t) { all_reduce_sum(t, {}); }
  // As above; while it waits for the others (over Gloo), give_up is asked
  // every few milliseconds and, once it says true (another rank failed),
  // this rank stops waiting at once and throws c10::Error; the group is then broken.
  virtual void all_reduce_sum(at::Tensor& t, const std::function<bool()>& give_up) = 0;
};

// Connects one rank per device (all CPU, or all CUDA with distinct indices),
// the ranks in the order given; returns each rank's end, index = rank. Blocks
// until every rank has joined (the constructors rendezvous through an
// in-process c10d::HashStore, each on a thread of its own; a rank that fails
// leaves the others waiting up to TIMEOUT). Errors: invalid_request for the
// devices (none, a mix, a cuda device named twice or without an index, one
// that does not exist) or a timeout that is not positive; unavailable, naming
// the backend and why, for the rest: CUDA or libgpubox_nccl_ranks.so that
// cannot be loaded (with dlerror(): libnccl.so.2 missing, say), a Gloo device
// that cannot bind 127.0.0.1, a modeld built without Gloo's headers.
Result<std::vector<std::unique_ptr<RankCollectives>>> connect_ranks(const std::vector<c10::Device>& devices,
                                                                  std::chrono::milliseconds timeout);

}  // namespace gpubox::modeld
