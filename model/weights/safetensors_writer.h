// Writes tensors as one safetensors file: the 8-byte header length, the JSON
// header (padded with spaces to a multiple of 8), then each tensor's bytes in
// the order given. Written to a temporary file beside path, then renamed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "model/weights/dtype.h"
#include "base/status.h"

namespace gpubox::weights {

// One tensor to write; data holds bytes (little-endian, C order) and is not owned.
struct TensorToWrite {
  std::string name;
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;
  const void* data = nullptr;
  std::size_t bytes = 0;
};

// invalid_request for a duplicate or empty name or bytes that do not match the shape; internal for an I/O error.
Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

}  // namespace gpubox::weights
