// The tensors a model tool returns, written whole to a file its caller names
// (run_model's and generate's `save_to`): safetensors, which safetensors,
// torch and numpy-based readers load. Any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace gpubox::mcp {

struct NamedTensor {
  std::string name;
  std::string dtype;  // the wire's: float32, float16, bfloat16, int64, ...
  std::vector<std::int64_t> shape;
  std::string bytes;  // C order, little-endian
};

// Refuses a path that is not absolute, whose directory is missing, or that already exists
// (invalid_request naming `save_to`), before anything runs.
Status check_new_file(const std::string& path);

// Writes tensors to a new file at path (never over an existing one); a partial file is removed.
Status write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors);

}  // namespace gpubox::mcp
