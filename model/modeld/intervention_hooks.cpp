#include "model/modeld/intervention_hooks.h"

#include <ATen/ATen.h>
#include <ATen/TensorIndexing.h>
#include <algorithm>
#include <optional>

namespace gpubox::modeld {
namespace {

using at::indexing::TensorIndex;
using hooks::OpKind;

// Advanced indices selecting where's rows, positions and heads of value: one
// index per leading axis up to the last selected one (the whole axis for the
// others), each shaped to broadcast against the rest, so the selected part
// keeps value's axis order. rows, when given, replaces where's rows. Empty
// when nothing is selected.
std::vector<TensorIndex> selection_index(const at::Tensor& value, const hooks::Selection& where, int position_axis,
                                         int head_axis, const std::vector<std::int64_t>* rows = nullptr) {
  const std::vector<std::int64_t>& picked_rows = rows ? *rows : where.rows;
  auto picked = [&](int axis) -> const std::vector<std::int64_t>* {
    if (axis == 0 && !picked_rows.empty()) return &picked_rows;
    if (axis == position_axis && !where.positions.empty()) return &where.positions;
    if (axis == head_axis && !where.heads.empty()) return &where.heads;
    return nullptr;
  };
  int last = -1;
  for (int axis = 0; axis < static_cast<int>(value.dim()); ++axis) {
    if (picked(axis)) last = axis;
  }
  std::vector<TensorIndex> index;
  auto options = at::TensorOptions().dtype(at::kLong).device(value.device());
  for (int axis = 0; axis <= last; ++axis) {
    std::vector<std::int64_t> view(static_cast<std::size_t>(last + 1), 1);
    view[static_cast<std::size_t>(axis)] = -1;
    const auto* list = picked(axis);
    at::Tensor indices = list ? at::tensor(*list, options) : at::arange(value.size(axis), options);
    index.emplace_back(indices.view(view));
  }
  return index;
}

// x with its component along direction removed (along the last axis), computed in float32.
at::Tensor project_out(const at::Tensor& x, const at::Tensor& direction) {
  at::Tensor unit = direction.to(at::kFloat);
  unit = unit / unit.norm();
  at::Tensor values = x.to(at::kFloat);
  return (values - (values * unit).sum(-1, true) * unit).to(x.scalar_type());
}

}  // namespace

InterventionHooks::InterventionHooks(const hooks::Plan& plan, const std::vector<HookPointInfo>& points,
                                     const std::vector<at::Tensor>& op_tensors) {
  for (std::size_t i = 0; i < plan.ops.size(); ++i) {
    const hooks::Op& op = plan.ops[i];
    const HookPointInfo& info = points.at(op.point);
    std::size_t capture = op.kind == OpKind::capture ? captured_.size() : 0;
    if (op.kind == OpKind::capture) captured_.emplace_back();
    steps_.push_back({&op, info.point, info.layer, info.position_axis, info.head_axis, capture, op_tensors.at(i)});
    wanted_.emplace(static_cast<int>(info.point), info.layer);
  }
}

bool InterventionHooks::wants(HookPoint point, int layer) const { return wanted_.count({static_cast<int>(point), layer}) > 0; }

void InterventionHooks::apply(HookPoint point, int layer, at::Tensor& value) {
  for (const Step& step : steps_) {
    if (step.point == point && step.layer == layer) run(step, value);
  }
}

void InterventionHooks::run(const Step& step, at::Tensor& value) {
  const hooks::Op& op = *step.op;
  std::vector<std::int64_t> all_rows;
  if (op.from_row && op.where.rows.empty()) {
    for (std::int64_t row = 0; row < value.size(0); ++row) all_rows.push_back(row);
  }
  auto index = selection_index(value, op.where, step.position_axis, step.head_axis, all_rows.empty() ? nullptr : &all_rows);
  at::Tensor region = index.empty() ? value : value.index(index);
  if (op.kind == OpKind::capture) {
    c10::ScalarType dtype = op.dtype == hooks::CaptureDtype::float32 ? at::kFloat : value.scalar_type();
    captured_[step.capture] = region.to(dtype, false, /*copy=*/true);
    return;
  }
  at::Tensor given = step.tensor.defined() ? step.tensor.to(value.scalar_type()) : at::Tensor();
  at::Tensor replacement;
  switch (op.kind) {
    case OpKind::set:
    case OpKind::mean: replacement = given; break;
    case OpKind::add: replacement = region + given * op.factor; break;
    case OpKind::scale: replacement = region * op.factor; break;
    case OpKind::zero: replacement = at::zeros_like(region); break;
    case OpKind::project_out: replacement = project_out(region, given); break;
    case OpKind::patch: {
      if (given.defined()) {
        replacement = given;
      } else {
        std::vector<std::int64_t> source = {*op.from_row};
        replacement = value.index(selection_index(value, op.where, step.position_axis, step.head_axis, &source));
      }
      break;
    }
    case OpKind::capture: break;
  }
  if (index.empty()) {
    value = replacement.expand(value.sizes()).contiguous();
  } else {
    at::Tensor edited = value.clone();
    edited.index_put_(index, replacement);
    value = edited;
  }
}

}  // namespace gpubox::modeld
