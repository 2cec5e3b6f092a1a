// hooks/'s intervention spec decoder (decode_plan), fed a request's ops as one
// JSON document, against a small model's hook points for a batch and token
// count taken from the input's length and three attachments. A plan it
// accepts must name only known points, hold in-range, non-negative indices,
// and only tensors that fit their attachment; check_finite then reads the
// attachments (filled with the input's own bytes, so NaNs and infinities
// come and go) and must refuse exactly the plans whose tensors hold one.
// Two SAEs stand loaded: sae_* ops must name one, fit its width, and hold
// features in [0, d_sae) and a top_k in [1, d_sae]. An fn op must name a
// function or a non-empty attachment, and hold extra tensors that fit theirs.
// (LibTorch's loader of the function's bytes is not fuzzed here: a libFuzzer
// target linking LibTorch is too heavy for CI; test_modeld_fn sends it
// malformed archives instead.)
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "hooks/spec.h"

namespace {

using gpubox::hooks::HookShape;

void check_indices(const std::vector<std::int64_t>& indices, std::int64_t size) {
  for (auto i : indices) {
    if (i < 0 || i >= size) __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto ops = nlohmann::json::parse(data, data + size, nullptr, false);
  if (ops.is_discarded()) return 0;
  auto batch = static_cast<std::int64_t>(1 + size % 3);
  auto tokens = static_cast<std::int64_t>(1 + size % 32);
  const std::vector<HookShape> points = {
      {"hook_embed", {batch, tokens, 8}, 1, -1},
      {"blocks.0.attn.hook_q", {batch, tokens, 2, 4}, 1, 2},
      {"blocks.0.attn.hook_pattern", {batch, 2, tokens, tokens}, 2, 1},
      {"blocks.0.attn.hook_result", {batch, tokens, 2, 8}, 1, 2},  // heads, then d_model (wider than a head)
      {"blocks.0.hook_resid_post", {batch, tokens, 8}, 1, -1},
      {"logits", {batch, tokens, 16}, 1, -1},
  };
  const std::vector<std::size_t> attachments = {32, 16, 4 * static_cast<std::size_t>(batch * tokens * 8)};
  const std::vector<gpubox::hooks::SaeShape> saes = {{"res", "blocks.0.hook_resid_post", 8, 32},
                                                     {"misfit", "hook_embed", 4, 16}};
  auto plan = gpubox::hooks::decode_plan(ops, points, attachments, {}, saes);
  if (!plan) return 0;
  for (const auto& op : plan->ops) {
    if (op.point >= points.size() || points[op.point].name != op.hook) __builtin_trap();
    const HookShape& point = points[op.point];
    check_indices(op.where.rows, batch);
    check_indices(op.where.positions, point.dims[static_cast<std::size_t>(point.position_axis)]);
    if (!op.where.heads.empty() && point.head_axis < 0) __builtin_trap();
    if (point.head_axis >= 0) check_indices(op.where.heads, point.dims[static_cast<std::size_t>(point.head_axis)]);
    if (op.from_row && (*op.from_row < 0 || *op.from_row >= batch)) __builtin_trap();
    if (op.tensor && op.tensor->attachment >= attachments.size()) __builtin_trap();
    if (op.kind == gpubox::hooks::OpKind::fn) {
      if (op.fn_name.empty() == !op.fn_attachment) __builtin_trap();
      if (op.fn_attachment && (*op.fn_attachment >= attachments.size() || attachments[*op.fn_attachment] == 0)) __builtin_trap();
      for (const auto& [name, arg] : op.extra) {
        if (arg.attachment >= attachments.size()) __builtin_trap();
      }
    } else if (!op.fn_name.empty() || op.fn_attachment || !op.extra.empty()) {
      __builtin_trap();
    }
    if (op.is_sae()) {
      if (op.sae >= saes.size() || saes[op.sae].hook != op.hook || saes[op.sae].d_in != point.dims.back()) __builtin_trap();
      check_indices(op.features, saes[op.sae].d_sae);
      if (op.top_k < 0 || op.top_k > saes[op.sae].d_sae) __builtin_trap();
      if (op.kind == gpubox::hooks::OpKind::sae_set && op.values.size() != op.features.size()) __builtin_trap();
      if (op.kind != gpubox::hooks::OpKind::sae_capture && op.kind != gpubox::hooks::OpKind::sae_splice && op.features.empty()) __builtin_trap();
    }
  }
  std::vector<std::string> bytes;
  for (std::size_t n : attachments) {
    std::string filled(n, '\0');
    for (std::size_t i = 0; i < n; ++i) filled[i] = static_cast<char>(data[i % size]);
    bytes.push_back(std::move(filled));
  }
  std::vector<std::string_view> views(bytes.begin(), bytes.end());
  bool any_bad = false;
  for (const auto& op : plan->ops) {
    any_bad |= op.tensor && !op.allow_nonfinite && gpubox::hooks::first_nonfinite(*op.tensor, views[op.tensor->attachment]);
  }
  if (gpubox::hooks::check_finite(*plan, views).is_ok() == any_bad) __builtin_trap();
  return 0;
}
