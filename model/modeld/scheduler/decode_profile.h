// decode_profile: what one decode step of generate() costs on a loaded
// model — its time per token, then, under LibTorch's (Kineto) profiler, the
// LibTorch ops it calls and the device kernels it launches. What
// `gpubox-modeld --profile-decode` prints, and what tests/device/run.sh
// reports on a GPU. The steps run where callers' run: in the model's
// BatchScheduler (on its thread, the profiler with them); the model is not shared.
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

#include "model/modeld/scheduler/batch_scheduler.h"
#include "model/modeld/decoder/decoder.h"
#include "base/status.h"

namespace gpubox::modeld {

struct DecodeProfileOptions {
  std::int64_t prompt_tokens = 16;
  std::int64_t steps = 32;  // decode steps timed, then profiled
};

// Greedy batch-1 generation of options.steps + 1 tokens from a fixed
// prompt, three times: a warm-up, a timed run (ms_per_token: the median
// time between two tokens, which includes the token's copy to the host) and
// a profiled run of the same steps. Counts are per decode step:
//   ops                    LibTorch ops, nested ones included
//   top_level_ops          the ops the decoder itself calls (not inside another op)
//   compute_ops            top-level ops that do work: not views or metadata (no
//                          kernel on a device), unless an op nested in them computes
//   device_kernels         kernels, copies and fills run on the device (0 on the CPU)
// and top_level_ops per layer; per layer, inside the decoder's layer scopes
// (kLayerScope): layer_ops (top-level) and layer_compute_ops, the figure the
// GPU-shaped decoding issue bounds (at most 15). "top_ops" lists the most
// frequent top-level ops, "layer_compute_ops" the computing ops of a layer.
Result<nlohmann::json> profile_decode(const Decoder& decoder, BatchScheduler& scheduler,
                                      const DecodeProfileOptions& options);

}  // namespace gpubox::modeld
