// The weights of a loaded model in TransformerLens' names and shapes
// (HookedTransformer's state dict with weight processing off: no folding, no
// centering), read from the model's checkpoint files, not from the forward
// pass's tensors. No state: any thread.
#pragma once

#include <ATen/core/Tensor.h>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/modeld/decoder/architecture.h"
#include "model/weights/checkpoint.h"

namespace gpubox::modeld {

// Every name model.weights serves for this architecture, in model order
// ("embed.W_E", "blocks.0.attn.W_Q", ..., "unembed.W_U").
std::vector<std::string> transformer_lens_weight_names(const Architecture& architecture);

// One weight, float32 on the CPU. Short names are accepted too: W_E, W_pos, W_U.
// Shapes as TransformerLens 4 (TransformerBridge's blocks[L].attn.W_Q, ...):
// W_Q [heads, d_model, d_head], W_K/W_V [kv_heads, d_model, d_head] (one per
// key-value head under grouped-query attention), W_O [heads, d_head, d_model], b_Q [heads, d_head],
// mlp.W_in/W_gate [d_model, d_mlp], W_out [d_mlp, d_model], W_U [d_model, vocab];
// Gemma's norm weights as the norm multiplies by them (1 + the stored value).
// invalid_request naming params.names and a few valid names for an unknown one.
Result<at::Tensor> transformer_lens_weight(const Architecture& architecture, const weights::Checkpoint& checkpoint,
                                           const std::string& name);

}  // namespace gpubox::modeld
