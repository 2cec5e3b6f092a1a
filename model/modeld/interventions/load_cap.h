// LoadCap: how many things callers may load into one model (functions, SAEs),
// by count and by bytes, and the refusal when one more would pass it. Plain
// data; any thread.
#pragma once

#include <cstddef>
#include <string>

#include "base/status.h"

namespace gpubox::modeld {

struct LoadCap {
  std::string what;     // "functions", "SAEs"
  std::size_t count;    // at most this many per model
  std::size_t bytes;    // at most this many bytes per model, all of them together
  std::string unload;   // the method that frees room ("model.fn_unload")
  std::string list;     // the method that lists what is loaded ("model.fns")

  // ok, or resource_exhausted naming the cap, what the model holds and how to
  // make room, when adding one more of `adding` bytes to held_count / held_bytes would pass it.
  Status admits(std::size_t held_count, std::size_t held_bytes, std::size_t adding) const;
};

// The fn op's functions (model.fn_load): 256 and 1 GiB of archives per model.
LoadCap function_cap();
// SAEs (model.sae_load and a model entry's saes): 64 and 32 GiB of weights per model.
LoadCap sae_cap();

// "1.5 GiB", "300 KiB", "12 bytes".
std::string byte_size(std::size_t bytes);

}  // namespace gpubox::modeld
