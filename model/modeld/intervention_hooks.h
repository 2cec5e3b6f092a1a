// InterventionHooks: the Hooks of a model.run plan — at each hook point the
// plan names it applies the plan's operations there, in order: captures copy
// the selected part of the activation, the other operations replace it.
#pragma once

#include <ATen/core/Tensor.h>
#include <set>
#include <utility>
#include <vector>

#include "hooks/spec.h"
#include "model/modeld/decoder.h"
#include "model/modeld/hook_points.h"

namespace gpubox::modeld {

// Applies a checked plan's operations during one forward pass.
class InterventionHooks final : public Hooks {
 public:
  // points: the model's hook points, in the order decode_plan was given them;
  // op_tensors: one per op of the plan, the tensor it was sent (on the model's device; undefined for none).
  InterventionHooks(const hooks::Plan& plan, const std::vector<HookPointInfo>& points,
                    const std::vector<at::Tensor>& op_tensors);
  bool wants(HookPoint point, int layer) const override;
  void apply(HookPoint point, int layer, at::Tensor& value) override;
  // One tensor per capture, in the plan's order (undefined if the forward pass never reached its point).
  const std::vector<at::Tensor>& captured() const { return captured_; }

 private:
  struct Step {
    const hooks::Op* op;
    HookPoint point;
    int layer;
    int position_axis;
    int head_axis;
    std::size_t capture;  // index into captured_ (captures only)
    at::Tensor tensor;    // the op's tensor, if it has one
  };
  void run(const Step& step, at::Tensor& value);

  std::vector<Step> steps_;
  std::set<std::pair<int, int>> wanted_;  // (point, layer)
  std::vector<at::Tensor> captured_;
};

}  // namespace gpubox::modeld
