#include "model/modeld/decoder/hook_points.h"

#include <fmt/format.h>

namespace gpubox::modeld {

std::string hook_point_name(HookPoint point, int layer) {
  static const char* names[] = {
      "hook_embed", "hook_pos_embed", "hook_resid_pre", "ln1.hook_normalized", "attn.hook_q", "attn.hook_k",
      "attn.hook_v", "attn.hook_rot_q", "attn.hook_rot_k", "attn.hook_attn_scores", "attn.hook_pattern",
      "attn.hook_z", "attn.hook_result", "hook_attn_out", "hook_resid_mid", "ln2.hook_normalized", "mlp.hook_pre",
      "mlp.hook_pre_linear", "mlp.hook_post", "hook_mlp_out", "hook_resid_post", "ln_final.hook_normalized", "logits"};
  std::string name = names[static_cast<int>(point)];
  return layer < 0 ? name : fmt::format("blocks.{}.{}", layer, name);
}

std::vector<HookPointInfo> hook_points(const Architecture& a) {
  using nlohmann::json;
  std::vector<HookPointInfo> points;
  auto add = [&](HookPoint point, int layer, json shape) {
    int axis = 1;
    for (std::size_t i = 0; i < shape.size(); ++i) {
      if (shape[i] == "pos" || shape[i] == "query_pos") axis = static_cast<int>(i);
    }
    bool per_head = point == HookPoint::q || point == HookPoint::k || point == HookPoint::v || point == HookPoint::rot_q ||
                    point == HookPoint::rot_k || point == HookPoint::z || point == HookPoint::result;
    bool per_head_pattern = point == HookPoint::attn_scores || point == HookPoint::pattern;
    int head_axis = per_head ? 2 : per_head_pattern ? 1 : -1;
    bool opt_in = point == HookPoint::result;
    points.push_back({point, layer, hook_point_name(point, layer), std::move(shape), axis, head_axis, opt_in});
  };
  json hidden = {"batch", "pos", a.hidden_size};
  add(HookPoint::embed, -1, hidden);
  if (a.learned_positions) add(HookPoint::pos_embed, -1, hidden);
  for (int l = 0; l < static_cast<int>(a.num_layers); ++l) {
    add(HookPoint::resid_pre, l, hidden);
    add(HookPoint::ln1_normalized, l, hidden);
    add(HookPoint::q, l, {"batch", "pos", a.num_heads, a.head_dim});
    add(HookPoint::k, l, {"batch", "pos", a.num_kv_heads, a.head_dim});
    add(HookPoint::v, l, {"batch", "pos", a.num_kv_heads, a.head_dim});
    if (a.rope.kind != RopeKind::none) {
      add(HookPoint::rot_q, l, {"batch", "pos", a.num_heads, a.head_dim});
      add(HookPoint::rot_k, l, {"batch", "pos", a.num_kv_heads, a.head_dim});
    }
    add(HookPoint::attn_scores, l, {"batch", a.num_heads, "query_pos", "key_pos"});
    add(HookPoint::pattern, l, {"batch", a.num_heads, "query_pos", "key_pos"});
    add(HookPoint::z, l, {"batch", "pos", a.num_heads, a.head_dim});
    add(HookPoint::result, l, {"batch", "pos", a.num_heads, a.hidden_size});  // z times each head's W_O, before b_O
    add(HookPoint::attn_out, l, hidden);
    add(HookPoint::resid_mid, l, hidden);
    add(HookPoint::ln2_normalized, l, hidden);
    add(HookPoint::mlp_pre, l, {"batch", "pos", a.intermediate_size});
    if (a.gated_mlp) add(HookPoint::mlp_pre_linear, l, {"batch", "pos", a.intermediate_size});
    add(HookPoint::mlp_post, l, {"batch", "pos", a.intermediate_size});
    add(HookPoint::mlp_out, l, hidden);
    add(HookPoint::resid_post, l, hidden);
  }
  add(HookPoint::ln_final_normalized, -1, hidden);
  add(HookPoint::logits, -1, {"batch", "pos", a.vocab_size});
  return points;
}

std::vector<hooks::HookShape> request_shapes(const std::vector<HookPointInfo>& points, std::int64_t batch,
                                            std::int64_t tokens, std::int64_t keys) {
  std::vector<hooks::HookShape> shapes;
  for (const auto& info : points) {
    hooks::HookShape shape{info.name, {}, info.position_axis, info.head_axis};
    for (const auto& dim : info.shape) {
      shape.dims.push_back(dim == "batch" ? batch : dim == "key_pos" ? keys : dim.is_string() ? tokens : dim.get<std::int64_t>());
    }
    shapes.push_back(std::move(shape));
  }
  return shapes;
}

void keep_last_position_after_blocks(std::vector<hooks::HookShape>& shapes) {
  for (auto& shape : shapes) {
    if (shape.name == "ln_final.hook_normalized" || shape.name == "logits") shape.dims[shape.position_axis] = 1;
  }
}

}  // namespace gpubox::modeld
