// StepGraph: one decode step captured as a CUDA graph and replayed per
// token, so that a step costs the host one launch instead of hundreds. The
// capture lives in libgpubox_step_graph.so (model/modeld/cuda/), built
// against the torch wheel's CUDA headers and loaded only when a model on a
// GPU asks for graphs: this binary still links libtorch_cpu only. One
// generation's thread.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <functional>
#include <memory>

#include "base/status.h"

namespace gpubox::modeld {

class StepGraph {
 public:
  virtual ~StepGraph() = default;
  // Runs the captured step again: it reads the static buffers it was captured
  // with and writes the same output tensor, which this returns.
  virtual const at::Tensor& replay() = 0;
};

// The step run eagerly on a side stream (CUDA graphs want warmed-up
// kernels), then captured; the step must read and write only tensors whose
// addresses stay fixed, and its repeated runs must be harmless (a decode step
// writes the same cache slot again). An error says why no graph could be made
// (no CUDA, the library missing, a capture that failed); the caller then runs steps eagerly.
Result<std::unique_ptr<StepGraph>> capture_step_graph(c10::Device device, const std::function<at::Tensor()>& step);

// The entry point libgpubox_step_graph.so exports (C linkage, looked up by dlsym).
using CaptureStepGraphFunction = StepGraph* (*)(int device_index, const std::function<at::Tensor()>* step,
                                                 std::string* error);
inline constexpr const char* kCaptureStepGraphSymbol = "gpubox_capture_step_graph";
inline constexpr const char* kStepGraphLibrary = "libgpubox_step_graph.so";

}  // namespace gpubox::modeld
