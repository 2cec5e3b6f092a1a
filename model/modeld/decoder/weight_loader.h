// Weight loading: binds a checkpoint's tensors (safetensors, mapped) to the
// parameters the Architecture expects, checking every name, shape and dtype
// before any compute and naming the tensor and file that is wrong, as
// llama.cpp's llama-model-loader does. Decoder::load calls it; the forward
// pass (decoder.cpp) only reads what it bound. Runs on the loading thread.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/modeld/decoder/architecture.h"
#include "model/weights/checkpoint.h"

namespace gpubox::modeld {

struct LoadProgress;

// The weights of one block, as the forward pass reads them; undefined where the architecture has none.
struct LayerWeights {
  at::Tensor ln1_w, ln1_b, ln2_w, ln2_b;         // before attention / before the MLP
  at::Tensor post_attn_w, post_mlp_w;            // Gemma 2's sandwich norms
  at::Tensor q_norm_w, k_norm_w;                 // Gemma 3: per-head norms of q and k, [head_dim]
  // q, k and v stacked: GPT-2's [hidden, 3 hidden] (Conv1D layout), else
  // [q out + 2 kv out, hidden] (Linear layout), stacked at load.
  at::Tensor qkv_w, qkv_b;
  at::Tensor q_w, q_b, k_w, k_b, v_w, v_b;       // Linear layout [out, in]: views of qkv_w and qkv_b
  at::Tensor o_w, o_b;
  at::Tensor gate_up_w, gate_up_b;               // gated MLP: gate and up stacked, [2 inner, hidden]
  at::Tensor gate_w, gate_b, up_w, up_b;         // views of gate_up_w and gate_up_b
  at::Tensor down_w, down_b;
  at::Tensor fc_w, fc_b, proj_w, proj_b;         // GPT-2 MLP (Conv1D layout)
};

// Every weight of a model, bound, and what binding them cost.
struct BoundWeights {
  at::Tensor embed, pos_embed, final_w, final_b, lm_head;
  std::vector<LayerWeights> layers;
  std::uint64_t held_bytes = 0;
  std::uint64_t parameters = 0;  // elements of the bound weights (a tied head counted once, as transformers does)
  std::vector<std::string> unexpected;
};

// Binds every tensor the architecture expects (Decoder::load's contract:
// tensors of the file's dtype on the CPU are used in place, as views of the
// mapped file; others are cast or copied, and their mapped pages dropped).
// A missing tensor, a wrong shape or dtype is an invalid_request naming it.
// REQUIRES: a c10::NoGradGuard in scope. Throws what LibTorch throws (out of
// memory on the device included); Decoder::load turns that into a Status.
Result<BoundWeights> bind_weights(const Architecture& arch, const weights::Checkpoint& checkpoint,
                                  c10::ScalarType dtype, c10::Device device, LoadProgress& progress);

}  // namespace gpubox::modeld
