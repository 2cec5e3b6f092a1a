#include "model/modeld/capture_hooks.h"

#include <ATen/ATen.h>
#include <algorithm>

namespace gpubox::modeld {

CaptureHooks::CaptureHooks(const hooks::Plan& plan, const std::vector<HookPointInfo>& points) {
  for (const auto& capture : plan.captures) {
    auto info = std::find_if(points.begin(), points.end(), [&](const HookPointInfo& p) { return p.name == capture.hook; });
    if (info == points.end()) continue;  // not reached: decode_plan refuses unknown names
    slots_.push_back({info->point, info->layer, info->position_axis, capture.positions,
                      capture.dtype == hooks::CaptureDtype::float32});
    wanted_.emplace(static_cast<int>(info->point), info->layer);
  }
  captured_.resize(slots_.size());
}

bool CaptureHooks::wants(HookPoint point, int layer) const { return wanted_.count({static_cast<int>(point), layer}) > 0; }

void CaptureHooks::apply(HookPoint point, int layer, at::Tensor& value) {
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    const Slot& slot = slots_[i];
    if (slot.point != point || slot.layer != layer) continue;
    c10::ScalarType dtype = slot.to_float ? at::kFloat : value.scalar_type();
    if (slot.positions.empty()) {
      captured_[i] = value.to(dtype, false, /*copy=*/true);
    } else {
      at::Tensor index = at::tensor(slot.positions, at::TensorOptions().dtype(at::kLong)).to(value.device());
      captured_[i] = value.index_select(slot.axis, index).to(dtype);
    }
  }
}

}  // namespace gpubox::modeld
