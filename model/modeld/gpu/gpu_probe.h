// gpu_probe: measured cuBLAS GEMM TFLOP/s (bf16, fp32), host↔device copy
// GB/s (to and from pinned host memory) and device memory GB/s of each CUDA device, next to its nominal figures where known;
// unavailable (with the reason) on a machine without CUDA. Its buffers are
// returned to the driver when it ends.
#pragma once

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace gpubox::modeld {

Result<nlohmann::json> gpu_probe();

}  // namespace gpubox::modeld
