// Weight loading: binds a checkpoint's tensors (safetensors, mapped) to the
// parameters the Architecture expects, checking every name, shape and dtype
// before any compute and naming the tensor and file that is wrong, as
// llama.cpp's llama-model-loader does. Decoder::load calls it; the forward
// pass (decoder.cpp) only reads what it bound. Runs on the loading thread.
#pragma once

#include <ATen/core/Tensor.h>
#include <algorithm>
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

// Which part of a model one rank of a split holds (tensor parallel, by
// Megatron's scheme): its query heads with their whole KV groups (q, k, v by
// rows; o by columns), its share of the MLP's inner units (gate, up, fc by
// output; down, proj by input) and of the vocabulary (embedding and
// unembedding rows, a contiguous range; the last rank's may be shorter).
// Norms, biases after a reduction and GPT-2's position embedding are whole on
// every rank. {0, 1} is the whole model.
struct Shard {
  int rank = 0;
  int ranks = 1;
  // The range [start, start + length) of count units that is this rank's (count divisible by ranks).
  std::int64_t start(std::int64_t count) const { return count / ranks * rank; }
  std::int64_t length(std::int64_t count) const { return count / ranks; }
  // The vocabulary's rows: ranks of ceil(vocab / ranks) rows, the last one the rest.
  std::int64_t vocab_start(std::int64_t vocab) const { return std::min(vocab, (vocab + ranks - 1) / ranks * rank); }
  std::int64_t vocab_length(std::int64_t vocab) const {
    return std::min(vocab, vocab_start(vocab) + (vocab + ranks - 1) / ranks) - vocab_start(vocab);
  }
};

// The architecture one rank computes: heads, KV heads, inner units and vocabulary its shard's.
Architecture rank_architecture(const Architecture& whole, const Shard& shard);

// Binds every tensor the architecture expects (Decoder::load's contract:
// tensors of the file's dtype on the CPU are used in place, as views of the
// mapped file; others are cast or copied, and their mapped pages dropped).
// A missing tensor, a wrong shape or dtype is an invalid_request naming it.
// REQUIRES: a c10::NoGradGuard in scope. Throws what LibTorch throws (out of
// memory on the device included); Decoder::load turns that into a Status.
// With a shard of a split, only that rank's slices are read and held (views
// of the mapped file where they lie contiguous in it), and the model's
// parameters are counted once over the ranks (rank 0 counts what is whole on every rank).
Result<BoundWeights> bind_weights(const Architecture& arch, const weights::Checkpoint& checkpoint,
                                  c10::ScalarType dtype, c10::Device device, LoadProgress& progress,
                                  const Shard& shard = {});

}  // namespace gpubox::modeld
