// StepGraph: one decode step captured as a CUDA graph and replayed per
// token, so that a step costs the host one launch instead of hundreds. The
// capture lives in libgpubox_step_graph.so (model/modeld/gpu/cuda/), built
// against the torch wheel's CUDA headers and loaded only when a model on a
// GPU asks for graphs: this binary still links libtorch_cpu only. One
// generation's thread.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <functional>
#include <memory>
#include <vector>

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

// One model's captured decode steps, kept for the next generation of the same
// shape: a graph replays the addresses it was captured with, so one is found
// again by rows, capacity and where its KV cache lies (a run of the model's
// pool), and its input buffers are the ones each generation fills. At most
// kKept, the least recently used dropped. One thread (the model's scheduler).
class StepGraphs {
 public:
  static constexpr std::size_t kKept = 8;
  struct Key {
    std::int64_t rows = 0, capacity = 0;
    const void* cache = nullptr;  // the first layer's keys
    bool operator==(const Key&) const = default;
  };
  struct Entry {
    Key key;
    at::Tensor ids, positions, key_mask, slot;  // what the graph reads: a generation copies its values in
    std::unique_ptr<StepGraph> graph;
    std::uint64_t used = 0;
  };
  Entry* find(const Key& key);  // null when none was captured
  Entry& keep(Entry entry);     // a new capture
  std::uint64_t captures() const { return captures_; }
  std::uint64_t reuses() const { return reuses_; }

 private:
  std::vector<Entry> entries_;
  std::uint64_t clock_ = 0, captures_ = 0, reuses_ = 0;
};

// The entry point libgpubox_step_graph.so exports (C linkage, looked up by dlsym).
using CaptureStepGraphFunction = StepGraph* (*)(int device_index, const std::function<at::Tensor()>* step,
                                                 std::string* error);
inline constexpr const char* kCaptureStepGraphSymbol = "gpubox_capture_step_graph";
inline constexpr const char* kStepGraphLibrary = "libgpubox_step_graph.so";

}  // namespace gpubox::modeld
