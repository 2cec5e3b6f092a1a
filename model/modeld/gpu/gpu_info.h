// gpu_info: each NVIDIA GPU's name, memory, utilization, temperature, driver
// and CUDA versions and processes, from NVML (libnvidia-ml.so.1, loaded at
// run time) or, without it, from nvidia-smi; {"gpus": []} and a message
// saying why on a machine without either.
#pragma once

#include <nlohmann/json.hpp>

namespace gpubox::modeld {

nlohmann::json gpu_info();

}  // namespace gpubox::modeld
