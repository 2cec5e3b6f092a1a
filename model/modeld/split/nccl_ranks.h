// The boundary between connect_ranks (rank_group.cpp, linked into modeld) and
// libgpubox_nccl_ranks.so (split/cuda/nccl_ranks.cpp, built against the wheel's
// CUDA side and NCCL, loaded by modeld only for ranks on GPUs): one C entry
// point that connects one rank, so that modeld needs no NCCL or CUDA header.
#pragma once

#include <c10/util/intrusive_ptr.h>
#include <cstdint>
#include <string>

#include "model/modeld/split/rank_group.h"

namespace c10d {
class Store;
}  // namespace c10d

namespace gpubox::modeld {

// Constructs rank RANK (of SIZE) of a c10d::ProcessGroupNCCL on cuda:DEVICE_INDEX
// over the shared STORE, with TIMEOUT_MS as the group's timeout. Called on a
// thread per rank, all ranks concurrently. The caller owns what it returns; null,
// and why in *error, when construction fails.
using ConnectNcclRankFunction = RankCollectives* (*)(const c10::intrusive_ptr<c10d::Store>* store, int rank,
                                                     int size, int device_index, std::int64_t timeout_ms,
                                                     std::string* error);
inline constexpr const char* kConnectNcclRankSymbol = "gpubox_connect_nccl_rank";
inline constexpr const char* kNcclRanksLibrary = "libgpubox_nccl_ranks.so";

}  // namespace gpubox::modeld
