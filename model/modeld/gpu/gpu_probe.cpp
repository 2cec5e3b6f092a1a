#include "model/modeld/gpu/gpu_probe.h"

#include <ATen/ATen.h>
#include <ATen/DeviceAccelerator.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/InferenceMode.h>
#include <chrono>
#include <fmt/format.h>

#include "model/modeld/gpu/cuda_runtime.h"
#include "model/modeld/gpu/gpu_info.h"
#include "model/modeld/gpu/gpu_exclusion.h"

namespace gpubox::modeld {
namespace {

using Seconds = std::chrono::duration<double>;

// Dense (no sparsity) peak figures from NVIDIA's data sheets: {bf16, fp32} TFLOP/s.
nlohmann::json nominal(const std::string& name) {
  struct Figures { const char* part; double bf16, fp32; };
  static const Figures known[] = {{"H200", 989, 67}, {"H100 SXM", 989, 67}, {"H100 PCIe", 756, 51}, {"H100", 989, 67},
                                  {"A100", 312, 19.5}, {"L40S", 362, 91.6}, {"A10G", 70, 31.2}, {"L4", 121, 30.3}};
  for (const auto& f : known) {
    if (name.find(f.part) != std::string::npos) return {{"bf16_tflops", f.bf16}, {"fp32_tflops", f.fp32}};
  }
  return nullptr;
}

// Waits for the device by reading one value back.
void sync(const at::Tensor& t) { (void)t.sum().item<float>(); }

double gemm_tflops(c10::Device device, c10::ScalarType dtype, std::int64_t n, int repeats) {
  auto options = at::TensorOptions().device(device).dtype(dtype);
  at::Tensor a = at::randn({n, n}, options), b = at::randn({n, n}, options);
  at::Tensor c = at::mm(a, b);
  sync(c);
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < repeats; ++i) c = at::mm(a, b);
  sync(c);
  double seconds = Seconds(std::chrono::steady_clock::now() - start).count();
  return 2.0 * static_cast<double>(n * n * n) * repeats / seconds / 1e12;
}

// Host<->device copy speed. The host side is pinned memory (page-locked, as the decode path's copies use):
// a copy into pageable memory goes through a staging buffer and measures the host's memcpy as well.
double copy_gbps(c10::Device from_device, c10::Device to_device, std::int64_t bytes, int repeats) {
  auto bytes_on = [bytes](c10::Device device) {
    return at::empty({bytes}, at::TensorOptions().dtype(at::kByte).device(device).pinned_memory(device.is_cpu()));
  };
  at::Tensor source = bytes_on(from_device), target = bytes_on(to_device);
  target.copy_(source);
  sync(target.narrow(0, 0, 1).to(at::kFloat));  // narrowed first: one byte converted, not the whole buffer
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < repeats; ++i) target.copy_(source);
  sync(target.narrow(0, 0, 1).to(at::kFloat));
  double seconds = Seconds(std::chrono::steady_clock::now() - start).count();
  return static_cast<double>(bytes) * repeats / seconds / 1e9;
}

// The device's memory bandwidth: a copy within it reads and writes each byte, and both are counted
// (a batch-1 decode step reads every weight once: its limit is weight bytes / this figure).
double memory_gbps(c10::Device device, std::int64_t bytes, int repeats) {
  at::Tensor source = at::empty({bytes}, at::TensorOptions().dtype(at::kByte).device(device));
  at::Tensor target = at::empty_like(source);
  target.copy_(source);
  sync(target.narrow(0, 0, 1).to(at::kFloat));
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < repeats; ++i) target.copy_(source);
  sync(target.narrow(0, 0, 1).to(at::kFloat));
  double seconds = Seconds(std::chrono::steady_clock::now() - start).count();
  return 2.0 * static_cast<double>(bytes) * repeats / seconds / 1e9;
}

}  // namespace

Result<nlohmann::json> gpu_probe() {
  if (Status s = enable_cuda(); !s) return s;
  c10::InferenceMode inference;
  nlohmann::json devices = nlohmann::json::array();
  nlohmann::json gpus = gpu_info()["gpus"];
  for (int i = 0; i < cuda_device_count(); ++i) {
    c10::Device device(c10::kCUDA, static_cast<c10::DeviceIndex>(i));
    nlohmann::json entry = {{"index", i},
                            {"bf16_tflops", gemm_tflops(device, at::kBFloat16, 8192, 20)},
                            {"fp32_tflops", gemm_tflops(device, at::kFloat, 8192, 5)},
                            {"host_to_device_gbps", copy_gbps(c10::Device(c10::kCPU), device, 1 << 30, 5)},
                            {"device_to_host_gbps", copy_gbps(device, c10::Device(c10::kCPU), 1 << 30, 5)},
                            {"device_memory_gbps", memory_gbps(device, 1 << 30, 10)},
                            {"host_memory", "pinned"}};
    if (static_cast<std::size_t>(i) < gpus.size() && gpus[static_cast<std::size_t>(i)].contains("name")) {
      std::string name = gpus[static_cast<std::size_t>(i)]["name"];
      entry["name"] = name;
      entry["nominal"] = nominal(name);
    }
    devices.push_back(entry);
  }
  // The probe's buffers go back to the driver, not to the caching allocator's pool: the models get that memory.
  GpuExclusive exclusive;  // emptyCache asserts while a CUDA graph capture runs in any thread
  at::getDeviceAllocator(c10::kCUDA)->emptyCache();
  return nlohmann::json{{"devices", devices}};
}

}  // namespace gpubox::modeld
