// The hook points of the decoder's forward path: their TransformerLens names
// and, per architecture, which exist and their shapes. No LibTorch (model.hooks
// and the spec's name checks need none).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hooks/spec.h"
#include "model/modeld/decoder/architecture.h"

namespace gpubox::modeld {

// The activations hook points expose, in forward order (TransformerLens' names in hook_point_name()).
enum class HookPoint {
  embed, pos_embed, resid_pre, ln1_normalized, q, k, v, rot_q, rot_k, attn_scores, pattern, z, result, attn_out,
  resid_mid, ln2_normalized, mlp_pre, mlp_pre_linear, mlp_post, mlp_out, resid_post, ln_final_normalized, logits,
};

// TransformerLens' name of a hook point ("blocks.3.attn.hook_q", "hook_embed"); layer is -1 outside blocks.
std::string hook_point_name(HookPoint point, int layer);

// One hook point a model has: its shape with symbolic dims ("batch", "pos",
// "query_pos", "key_pos") and numbers, and which axis positions select.
struct HookPointInfo {
  HookPoint point;
  int layer;  // -1 outside blocks
  std::string name;
  nlohmann::json shape;
  int position_axis;  // the "pos" (or "query_pos") axis
  int head_axis;      // the heads axis of attn.hook_q/k/v/z/result, rot_q/k, attn_scores, pattern; else -1
  bool opt_in = false;  // left out of an every-point capture (run_with_cache): attn.hook_result, d_model per head
};

// Every hook point of this architecture, in forward order.
std::vector<HookPointInfo> hook_points(const Architecture& architecture);

// The points' concrete shapes for one forward pass of batch rows of tokens
// new positions each, attending to keys positions (tokens, without a KV cache), for hooks::decode_plan.
std::vector<hooks::HookShape> request_shapes(const std::vector<HookPointInfo>& points, std::int64_t batch,
                                            std::int64_t tokens, std::int64_t keys);

// With last_only the decoder keeps only the last position before the final
// norm: the points after it (ln_final.hook_normalized, logits) get 1 position.
void keep_last_position_after_blocks(std::vector<hooks::HookShape>& shapes);

}  // namespace gpubox::modeld
