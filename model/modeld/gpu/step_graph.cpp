#include "model/modeld/gpu/step_graph.h"

#include <algorithm>
#include <mutex>
#include <string>

#include "model/modeld/gpu/beside_executable.h"
#include "model/modeld/gpu/cuda_runtime.h"
#include "model/modeld/gpu/gpu_exclusion.h"

namespace gpubox::modeld {
namespace {

// libgpubox_step_graph.so beside this executable, loaded once; null, and why in error, when it cannot be.
CaptureStepGraphFunction capture_function(std::string& why_not) {
  static std::once_flag once;
  static CaptureStepGraphFunction function = nullptr;
  static std::string error;
  std::call_once(once, [] {
    function = reinterpret_cast<CaptureStepGraphFunction>(
        load_beside_executable(kStepGraphLibrary, kCaptureStepGraphSymbol, error));
  });
  why_not = error;
  return function;
}

}  // namespace

StepGraphs::Entry* StepGraphs::find(const Key& key) {
  for (auto& entry : entries_) {
    if (entry.key == key) {
      entry.used = ++clock_;
      ++reuses_;
      return &entry;
    }
  }
  return nullptr;
}

StepGraphs::Entry& StepGraphs::keep(Entry entry) {
  ++captures_;
  entry.used = ++clock_;
  if (entries_.size() >= kKept) {
    auto oldest = std::min_element(entries_.begin(), entries_.end(),
                                   [](const Entry& a, const Entry& b) { return a.used < b.used; });
    entries_.erase(oldest);
  }
  entries_.push_back(std::move(entry));
  return entries_.back();
}

Result<std::unique_ptr<StepGraph>> capture_step_graph(c10::Device device, const std::function<at::Tensor()>& step) {
  if (!device.is_cuda()) return Status(ErrorCode::unavailable, "CUDA graphs need a cuda device, not " + device.str());
  if (Status s = enable_cuda(); !s) return s;
  std::string error;
  CaptureStepGraphFunction capture = capture_function(error);
  if (!capture) return Status(ErrorCode::unavailable, error);
  GpuExclusive exclusive;  // no other thread allocates, frees cached memory or syncs during the capture
  StepGraph* graph = capture(device.has_index() ? device.index() : 0, &step, &error);
  if (!graph) return Status(ErrorCode::internal, "capturing the decode step failed: " + error);
  return std::unique_ptr<StepGraph>(graph);
}

}  // namespace gpubox::modeld
