#include "model/weights/dtype.h"

#include <array>
#include <utility>

namespace gpubox::weights {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  std::size_t size;
  bool is_float;
};

constexpr std::array<DTypeInfo, 16> kDTypes = {{
    {DType::F64, "F64", 8, true},
    {DType::F32, "F32", 4, true},
    {DType::F16, "F16", 2, true},
    {DType::BF16, "BF16", 2, true},
    {DType::I64, "I64", 8, false},
    {DType::I32, "I32", 4, false},
    {DType::I16, "I16", 2, false},
    {DType::I8, "I8", 1, false},
    {DType::U8, "U8", 1, false},
    {DType::BOOL, "BOOL", 1, false},
    {DType::F8_E4M3, "F8_E4M3", 1, true},
    {DType::F8_E5M2, "F8_E5M2", 1, true},
    {DType::U16, "U16", 2, false},
    {DType::U32, "U32", 4, false},
    {DType::U64, "U64", 8, false},
    {DType::F8_E8M0, "F8_E8M0", 1, true},
}};

const DTypeInfo& info(DType dtype) {
  for (const auto& entry : kDTypes) {
    if (entry.dtype == dtype) return entry;
  }
  return kDTypes[0];  // unreachable for a valid enum value
}

}  // namespace

std::string_view dtype_name(DType dtype) { return info(dtype).name; }
std::size_t dtype_size(DType dtype) { return info(dtype).size; }
bool dtype_is_float(DType dtype) { return info(dtype).is_float; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& entry : kDTypes) {
    if (entry.name == name) return entry.dtype;
  }
  return std::nullopt;
}

}  // namespace gpubox::weights
