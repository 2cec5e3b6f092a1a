// CaptureHooks: the Hooks of a model.run plan's captures — at each selected
// point it copies the activation (the plan's positions along the point's
// position axis, cast to float32 or left in the model dtype) and leaves the
// forward pass untouched.
#pragma once

#include <ATen/core/Tensor.h>
#include <set>
#include <utility>
#include <vector>

#include "hooks/spec.h"
#include "model/modeld/decoder.h"
#include "model/modeld/hook_points.h"

namespace gpubox::modeld {

// Copies the activations a plan captures; the captures come back in the plan's order.
class CaptureHooks final : public Hooks {
 public:
  // points: the model's hook points; every capture names one of them (decode_plan checked that).
  CaptureHooks(const hooks::Plan& plan, const std::vector<HookPointInfo>& points);
  bool wants(HookPoint point, int layer) const override;
  void apply(HookPoint point, int layer, at::Tensor& value) override;
  // One tensor per capture (undefined if the forward pass never reached its point).
  const std::vector<at::Tensor>& captured() const { return captured_; }

 private:
  struct Slot {
    HookPoint point;
    int layer;
    int axis;
    std::vector<std::int64_t> positions;  // empty: all
    bool to_float;
  };
  std::vector<Slot> slots_;
  std::set<std::pair<int, int>> wanted_;  // (point, layer)
  std::vector<at::Tensor> captured_;
};

}  // namespace gpubox::modeld
