#include "model/modeld/gpu/cuda_runtime.h"

#include <ATen/Context.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <dlfcn.h>
#include <fmt/format.h>
#include <mutex>
#include <string>

namespace gpubox::modeld {

Status enable_cuda() {
  static std::once_flag once;
  static std::string error;
  std::call_once(once, [] {
    // libtorch_cuda.so sits beside the libtorch_cpu.so this binary was linked with.
    Dl_info where{};
    if (!dladdr(reinterpret_cast<void*>(&at::detail::getCUDAHooks), &where) || !where.dli_fname) {
      error = "CUDA is unavailable: cannot locate libtorch_cpu.so";
      return;
    }
    std::string cpu_library = where.dli_fname;
    std::string path = cpu_library.substr(0, cpu_library.rfind('/') + 1) + "libtorch_cuda.so";
    if (!dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL)) {
      const char* why = dlerror();
      error = fmt::format("CUDA is unavailable: cannot load {}: {}", path, why ? why : "unknown error");
      return;
    }
    if (!at::detail::getCUDAHooks().hasCUDA()) {
      error = "CUDA is unavailable: no NVIDIA GPU or driver on this machine";
      return;
    }
    // cuDNN's SDPA builds a graph for every new key length, which a decode
    // step always has: flash and memory-efficient attention need no rebuild.
    at::globalContext().setSDPUseCuDNN(false);
  });
  if (!error.empty()) return {ErrorCode::unavailable, error};
  return Status::ok();
}

int cuda_device_count() {
  if (!enable_cuda()) return 0;
  return static_cast<int>(at::detail::getCUDAHooks().deviceCount());
}

}  // namespace gpubox::modeld
