// A tensor a caller sends with a request: a descriptor in the body
// ({"dtype", "shape", "attachment"}) naming one of the CALL's raw attachment
// frames, checked against that frame's size. No LibTorch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace gpubox::hooks {

enum class WireDtype { float32, float16, bfloat16 };

struct TensorArg {
  WireDtype dtype = WireDtype::float32;
  std::vector<std::int64_t> shape;
  std::size_t attachment = 0;  // index of the CALL's attachment holding the bytes (C order, little-endian)
};

// Decodes the descriptor at where ("params.ops[0].vector"); the frame must hold exactly shape's bytes.
Result<TensorArg> decode_tensor_arg(const nlohmann::json& descriptor, const std::string& where,
                                    const std::vector<std::size_t>& attachment_bytes);

// A NaN or an infinity in a tensor's bytes: its index (one per dimension) and what it is.
struct NonFinite {
  std::vector<std::int64_t> index;
  const char* what;  // "NaN", "+inf", "-inf"
};

// The first element of bytes (arg's tensor, as decode_tensor_arg checked it) that is not finite, if any.
std::optional<NonFinite> first_nonfinite(const TensorArg& arg, std::string_view bytes);

// Whether shape broadcasts to target as NumPy and PyTorch broadcast (trailing dims equal or 1).
bool broadcasts_to(const std::vector<std::int64_t>& shape, const std::vector<std::int64_t>& target);

// "float32", "float16", "bfloat16"
const char* wire_dtype_name(WireDtype dtype);

// "[2, 5, 64]"
std::string shape_text(const std::vector<std::int64_t>& shape);

}  // namespace gpubox::hooks
