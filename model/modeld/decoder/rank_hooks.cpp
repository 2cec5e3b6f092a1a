#include "model/modeld/decoder/rank_hooks.h"

#include <ATen/ATen.h>

namespace gpubox::modeld {

int split_axis(HookPoint point, int dims) {
  switch (point) {
    case HookPoint::q: case HookPoint::k: case HookPoint::v: case HookPoint::rot_q: case HookPoint::rot_k:
    case HookPoint::z: case HookPoint::result:
      return 2;  // [batch, pos, heads, ...]
    case HookPoint::attn_scores: case HookPoint::pattern:
      return 1;  // [batch, heads, query_pos, key_pos]
    case HookPoint::mlp_pre: case HookPoint::mlp_pre_linear: case HookPoint::mlp_post:
      return dims - 1;  // [batch, pos, inner units]
    default:
      return -1;
  }
}

void RankHooks::apply(HookPoint point, int layer, at::Tensor& value) {
  if (point == HookPoint::logits) {  // whole on rank 0 only, after the other ranks' passes ended
    if (rank_ != 0) return;
    try {
      request_->apply(point, layer, value);
    } catch (...) {
      exchange_.abandon_pass();  // a refusal of the caller's, not a rank's failure
      throw;
    }
    return;
  }
  int axis = split_axis(point, static_cast<int>(value.dim()));
  // Rank 0's hooks, on the whole value; if they throw, every rank leaves the pass at the broadcast below.
  auto apply_request = [&](at::Tensor& whole) {
    try {
      request_->apply(point, layer, whole);
    } catch (...) {
      exchange_.abandon_pass();
      exchange_.broadcast(rank_, at::Tensor(), device_);
      throw;
    }
  };
  at::Tensor replaced;
  if (axis < 0) {
    if (rank_ == 0) {
      at::Tensor seen = value;
      apply_request(value);
      if (!value.is_same(seen)) replaced = value;
    }
    at::Tensor given = exchange_.broadcast(rank_, replaced, device_);
    if (rank_ != 0 && given.defined()) value = given;
    return;
  }
  std::vector<at::Tensor> parts = exchange_.gather(rank_, value, device_);
  if (rank_ == 0) {
    at::Tensor whole = at::cat(parts, axis);
    at::Tensor seen = whole;
    apply_request(whole);
    if (!whole.is_same(seen)) replaced = whole;
  }
  at::Tensor given = exchange_.broadcast(rank_, replaced, device_);
  if (given.defined()) value = given.narrow(axis, rank_ * value.size(axis), value.size(axis));
}

}  // namespace gpubox::modeld
