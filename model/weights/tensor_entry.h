// What one tensor of a safetensors file is (name, dtype, shape, where its
// bytes are), and the limits a file is opened with. Plain values; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/weights/dtype.h"

namespace gpubox::weights {

struct TensorEntry {
  std::string name;
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;
  std::uint64_t offset = 0;  // from the start of the data section
  std::uint64_t size = 0;    // bytes

  // The product of shape (1 for a scalar); validated not to overflow at open.
  std::uint64_t element_count() const;
};

struct OpenOptions {
  // The JSON header's length is refused above this (the format's own library caps it at 100 MB).
  std::uint64_t max_header_bytes = 100 << 20;
};

}  // namespace gpubox::weights
