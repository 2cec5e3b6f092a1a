// A tensor of a safetensors file as an at::Tensor: a view of the file's
// mapped bytes (F32, F16, BF16), which the caller copies or casts before the
// file goes away. Any thread.
#pragma once

#include <ATen/core/Tensor.h>

#include "base/status.h"
#include "model/weights/safetensors.h"

namespace gpubox::modeld {

// A read-only view of entry's bytes in file (no copy); invalid_request naming
// the tensor and the file for a dtype other than F32, F16 or BF16.
Result<at::Tensor> stored_tensor(const weights::SafetensorsFile& file, const weights::TensorEntry& entry);

}  // namespace gpubox::modeld
