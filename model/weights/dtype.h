// The element types of safetensors files, by the names the format gives them.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace gpubox::weights {

// safetensors' dtype names; F8_E4M3 is the "fn" variant (no infinities), as in the
// format; F8_E8M0 is the exponent-only scale type of MX formats.
enum class DType { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL, F8_E4M3, F8_E5M2, U16, U32, U64, F8_E8M0 };

// The format's name of a dtype ("F32").
std::string_view dtype_name(DType dtype);
// Bytes per element.
std::size_t dtype_size(DType dtype);
// The dtype a name stands for; nullopt for a name this reader does not know
// (the format's sub-byte F4 and F6 types, which it refuses).
std::optional<DType> dtype_from_name(std::string_view name);
// True for the floating-point dtypes.
bool dtype_is_float(DType dtype);

}  // namespace gpubox::weights
