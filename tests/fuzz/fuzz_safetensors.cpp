// Fuzzes the safetensors reader (model/weights/): any bytes either fail with
// invalid_request or open into tensors that tile the data section exactly,
// whose every element reads back without touching memory outside the input.
// The same bytes go to the model.safetensors.index.json parser: an error, or
// a weight map of plain file names only.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "model/weights/checkpoint.h"
#include "model/weights/safetensors.h"
#include "model/weights/weight_map.h"

using namespace gpubox::weights;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 1 << 20) return -1;
  auto weight_map = parse_weight_map(std::string_view(reinterpret_cast<const char*>(data), size), "index");  // NOLINT
  if (weight_map) {
    for (const auto& [name, file] : *weight_map) {
      if (!is_plain_file_name(file) || file.find('/') != std::string::npos) std::abort();
    }
  } else if (weight_map.status().code() != gpubox::ErrorCode::invalid_request) {
    std::abort();
  }
  std::vector<std::byte> bytes(size);
  for (std::size_t i = 0; i < size; ++i) bytes[i] = static_cast<std::byte>(data[i]);
  OpenOptions options;
  options.max_header_bytes = 1 << 16;
  auto file = SafetensorsFile::from_bytes("fuzz", std::move(bytes), options);
  if (!file) {
    if (file.status().code() != gpubox::ErrorCode::invalid_request) std::abort();
    if (file.status().message().rfind("fuzz: ", 0) != 0) std::abort();
    return 0;
  }
  const SafetensorsFile& f = **file;
  std::uint64_t expected_offset = 0;
  for (const auto& entry : f.tensors()) {
    if (entry.offset != expected_offset) std::abort();
    expected_offset += entry.size;
    if (entry.element_count() * dtype_size(entry.dtype) != entry.size) std::abort();
    if (f.find(entry.name) == nullptr || f.find(entry.name)->name != entry.name) std::abort();
    auto span = f.bytes(entry);
    if (span.size() != entry.size) std::abort();
    std::uint64_t count = entry.element_count();
    for (std::uint64_t i = 0; i < count && i < 64; ++i) (void)element_as_text(entry, span, i);
    if (count > 0) (void)element_as_double(entry, span, count - 1);
    if (!std::isnan(element_as_double(entry, span, count))) std::abort();
  }
  if (expected_offset != f.data_bytes()) std::abort();
  return 0;
}
