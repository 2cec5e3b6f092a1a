// GpuInventory: the NVIDIA GPUs a sandbox was given, found without CUDA,
// NVML or running nvidia-smi (PID 1 reaps every child, so it runs no helper
// it would have to wait for): the device nodes /dev/nvidiaN it can open, and
// each one's model from the driver's /proc/driver/nvidia/gpus/*/information.
// Pure reads; any thread.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpubox::usage {

struct GpuInventory {
  int count = 0;                    // device nodes /dev/nvidia0, /dev/nvidia1, … present
  std::optional<std::string> type;  // "NVIDIA H100 80GB HBM3" (several, joined with ", "), null when unknown
  std::vector<std::string> models;  // one per device node, "" where the driver did not say
  std::string source;               // how they were found, for people
};

// The driver's information file: "Model: NAME" and "Device Minor: N"; nullopt without both.
struct NvidiaGpuInfo {
  std::string model;
  int minor = -1;
};
std::optional<NvidiaGpuInfo> parse_nvidia_information(std::string_view text);

// Looks in dev_dir for nvidiaN nodes and in nvidia_gpus_dir for their models.
GpuInventory probe_gpus(const std::string& dev_dir = "/dev", const std::string& nvidia_gpus_dir = "/proc/driver/nvidia/gpus");

}  // namespace gpubox::usage
