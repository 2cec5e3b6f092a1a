// Validates the bytes of a whole safetensors file (8-byte length, JSON
// header, data section) before anything of it is used. Private to
// model/weights/; any thread.
#pragma once

#include <cstddef>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "model/weights/tensor_entry.h"
#include "base/status.h"

namespace gpubox::weights {

struct ParsedFile {
  std::uint64_t data_start = 0;           // 8 + header length
  std::uint64_t data_bytes = 0;           // the data section's length
  std::vector<TensorEntry> tensors;       // sorted by offset, then name
  std::map<std::string, std::string> metadata;
};

// Checks what the safetensors library checks, and refuses what it lets
// through unnoticed (duplicate keys, extra keys in an entry): see
// model/weights/README.md. Errors are invalid_request, prefixed by label and,
// where there is one, the tensor.
Result<ParsedFile> parse_safetensors(std::span<const std::byte> whole, const OpenOptions& options,
                                     const std::string& label);

}  // namespace gpubox::weights
