#include "model/modeld/gpu/step_graph.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <string>

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
    char self[PATH_MAX] = {};
    ssize_t length = ::readlink("/proc/self/exe", self, sizeof self - 1);
    if (length <= 0) {
      error = "cannot locate this executable (/proc/self/exe)";
      return;
    }
    std::string path(self, static_cast<std::size_t>(length));
    path = path.substr(0, path.rfind('/') + 1) + kStepGraphLibrary;
    void* library = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!library) {
      const char* why = ::dlerror();
      error = fmt::format("cannot load {}: {}", path, why ? why : "unknown error");
      return;
    }
    function = reinterpret_cast<CaptureStepGraphFunction>(::dlsym(library, kCaptureStepGraphSymbol));
    if (!function) error = fmt::format("{} has no {}", path, kCaptureStepGraphSymbol);
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
