// Local GPUs for a sandbox, given the way the NVIDIA container toolkit gives
// them: the chosen /dev/nvidiaN with the driver's shared nodes (nvidiactl,
// nvidia-uvm, nvidia-uvm-tools, nvidia-modeset, nvidia-caps), and the host
// driver's user-space files (its libraries from the ld.so cache, nvidia-smi
// and friends) bound read-only at their own paths. plan_gpus() runs in the
// CLI before anything is created. Any thread.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/status.h"

namespace gpubox::host {

struct GpuPlan {
  std::vector<int> indices;                 // the host's GPU numbers, ascending
  std::vector<std::string> device_nodes;    // bound read-write
  std::vector<std::string> driver_files;    // bound read-only (real paths)
  std::map<std::string, std::string> env;   // NVIDIA_VISIBLE_DEVICES, CUDA_VISIBLE_DEVICES
};

// Parses --gpu ("all" or GPU numbers such as "0,1") and finds what to bind
// under dev_dir. invalid_request, with a message for the user, on a malformed
// value, a host without NVIDIA devices, or a GPU number the host lacks.
Result<GpuPlan> plan_gpus(const std::string& request, const std::string& dev_dir = "/dev");

// The driver libraries in `ldconfig -p` output (one path per library).
std::vector<std::string> driver_libraries_in(const std::string& ldconfig_output);

}  // namespace gpubox::host
