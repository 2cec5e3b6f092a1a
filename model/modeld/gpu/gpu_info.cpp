#include "model/modeld/gpu/gpu_info.h"

#include <array>
#include <cstdio>
#include <dlfcn.h>
#include <fmt/format.h>
#include <sstream>
#include <string>
#include <vector>

namespace gpubox::modeld {
namespace {

using nlohmann::json;

// The few NVML types used, as nvml.h declares them.
struct NvmlMemory { unsigned long long total, free, used; };
struct NvmlUtilization { unsigned int gpu, memory; };
struct NvmlProcess { unsigned int pid; unsigned long long used_memory; unsigned int gpu_instance, compute_instance; };
using NvmlDevice = void*;

// NVML's entry points, resolved once; ok() is false when the library is absent.
class Nvml {
 public:
  Nvml() {
    handle_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!handle_) return;
    init_ = symbol<int (*)()>("nvmlInit_v2");
    count_ = symbol<int (*)(unsigned int*)>("nvmlDeviceGetCount_v2");
    by_index_ = symbol<int (*)(unsigned int, NvmlDevice*)>("nvmlDeviceGetHandleByIndex_v2");
    name_ = symbol<int (*)(NvmlDevice, char*, unsigned int)>("nvmlDeviceGetName");
    memory_ = symbol<int (*)(NvmlDevice, NvmlMemory*)>("nvmlDeviceGetMemoryInfo");
    utilization_ = symbol<int (*)(NvmlDevice, NvmlUtilization*)>("nvmlDeviceGetUtilizationRates");
    temperature_ = symbol<int (*)(NvmlDevice, int, unsigned int*)>("nvmlDeviceGetTemperature");
    driver_ = symbol<int (*)(char*, unsigned int)>("nvmlSystemGetDriverVersion");
    cuda_ = symbol<int (*)(int*)>("nvmlSystemGetCudaDriverVersion");
    processes_ = symbol<int (*)(NvmlDevice, unsigned int*, NvmlProcess*)>("nvmlDeviceGetComputeRunningProcesses_v3");
    ok_ = init_ && count_ && by_index_ && name_ && memory_ && init_() == 0;
  }
  bool ok() const { return ok_; }

  json read() const {
    json out = {{"source", "nvml"}, {"gpus", json::array()}};
    std::array<char, 96> text{};
    if (driver_ && driver_(text.data(), text.size()) == 0) out["driver_version"] = text.data();
    int cuda = 0;
    if (cuda_ && cuda_(&cuda) == 0) out["cuda_version"] = fmt::format("{}.{}", cuda / 1000, (cuda % 1000) / 10);
    unsigned int count = 0;
    count_(&count);
    for (unsigned int i = 0; i < count; ++i) {
      NvmlDevice device = nullptr;
      if (by_index_(i, &device) != 0) continue;
      json gpu = {{"index", i}};
      if (name_(device, text.data(), text.size()) == 0) gpu["name"] = text.data();
      NvmlMemory memory{};
      if (memory_(device, &memory) == 0) gpu["memory_used_bytes"] = memory.used, gpu["memory_total_bytes"] = memory.total;
      NvmlUtilization utilization{};
      if (utilization_ && utilization_(device, &utilization) == 0) gpu["utilization_percent"] = utilization.gpu;
      unsigned int celsius = 0;
      if (temperature_ && temperature_(device, 0, &celsius) == 0) gpu["temperature_c"] = celsius;
      std::vector<NvmlProcess> processes(64);
      unsigned int n = static_cast<unsigned int>(processes.size());
      json procs = json::array();
      if (processes_ && processes_(device, &n, processes.data()) == 0) {
        for (unsigned int p = 0; p < n; ++p) procs.push_back({{"pid", processes[p].pid}, {"used_memory_bytes", processes[p].used_memory}});
      }
      gpu["processes"] = procs;
      out["gpus"].push_back(gpu);
    }
    return out;
  }

 private:
  template <typename F>
  F symbol(const char* name) { return reinterpret_cast<F>(dlsym(handle_, name)); }

  void* handle_ = nullptr;
  bool ok_ = false;
  int (*init_)() = nullptr;
  int (*count_)(unsigned int*) = nullptr;
  int (*by_index_)(unsigned int, NvmlDevice*) = nullptr;
  int (*name_)(NvmlDevice, char*, unsigned int) = nullptr;
  int (*memory_)(NvmlDevice, NvmlMemory*) = nullptr;
  int (*utilization_)(NvmlDevice, NvmlUtilization*) = nullptr;
  int (*temperature_)(NvmlDevice, int, unsigned int*) = nullptr;
  int (*driver_)(char*, unsigned int) = nullptr;
  int (*cuda_)(int*) = nullptr;
  int (*processes_)(NvmlDevice, unsigned int*, NvmlProcess*) = nullptr;
};

// nvidia-smi's CSV, one line per GPU; nullopt-like empty json when it cannot run.
json from_nvidia_smi() {
  FILE* pipe = popen("nvidia-smi --query-gpu=index,name,memory.used,memory.total,utilization.gpu,temperature.gpu,driver_version "
                     "--format=csv,noheader,nounits 2>/dev/null", "r");
  if (!pipe) return json();
  std::string output;
  std::array<char, 4096> buffer{};
  while (std::size_t n = fread(buffer.data(), 1, buffer.size(), pipe)) output.append(buffer.data(), n);
  if (pclose(pipe) != 0 || output.empty()) return json();
  json out = {{"source", "nvidia-smi"}, {"gpus", json::array()}};
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    std::vector<std::string> fields;
    std::istringstream cells(line);
    for (std::string cell; std::getline(cells, cell, ',');) {
      cell.erase(0, cell.find_first_not_of(' '));
      fields.push_back(cell);
    }
    if (fields.size() < 7) continue;
    auto number = [](const std::string& s) { return std::strtoull(s.c_str(), nullptr, 10); };
    out["gpus"].push_back({{"index", number(fields[0])}, {"name", fields[1]},
                           {"memory_used_bytes", number(fields[2]) << 20}, {"memory_total_bytes", number(fields[3]) << 20},
                           {"utilization_percent", number(fields[4])}, {"temperature_c", number(fields[5])}});
    out["driver_version"] = fields[6];
  }
  return out;
}

}  // namespace

json gpu_info() {
  static const Nvml nvml;
  if (nvml.ok()) return nvml.read();
  json smi = from_nvidia_smi();
  if (!smi.is_null()) return smi;
  return {{"source", "none"}, {"gpus", json::array()},
          {"message", "no NVIDIA GPU: NVML (libnvidia-ml.so.1) is not installed and nvidia-smi does not run on this machine"}};
}

}  // namespace gpubox::modeld
