// Reading single elements of a tensor's bytes, for printing and checks; not a
// compute path. Any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "model/weights/tensor_entry.h"

namespace gpubox::weights {

// Element i of a tensor as double (F16/BF16/F8 converted exactly; I64/U64
// beyond 2^53 rounded). NaN when index is not below the element count or
// bytes is shorter than the entry says.
double element_as_double(const TensorEntry& entry, std::span<const std::byte> bytes, std::uint64_t index);

// Element i as exact text: integers and BOOL in full, floats as the shortest
// decimal that reads back as the same double ("nan", "inf", "-inf" for
// those). Empty when element_as_double would be NaN for a bad index.
std::string element_as_text(const TensorEntry& entry, std::span<const std::byte> bytes, std::uint64_t index);

// The exact value of the IEEE-style 16- and 8-bit floats.
double half_to_double(std::uint16_t bits);
double bfloat16_to_double(std::uint16_t bits);
double float8_e4m3_to_double(std::uint8_t bits);
double float8_e5m2_to_double(std::uint8_t bits);
// 2^(bits - 127); 0xff is NaN.
double float8_e8m0_to_double(std::uint8_t bits);

}  // namespace gpubox::weights
