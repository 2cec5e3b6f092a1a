#include "model/weights/element.h"

#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>

namespace gpubox::weights {
namespace {

// Little-endian bytes at data[index * N], as the format stores them.
template <typename T>
T load(std::span<const std::byte> bytes, std::uint64_t index) {
  T value;
  std::memcpy(&value, bytes.data() + index * sizeof(T), sizeof(T));
  if constexpr (std::endian::native == std::endian::big) {
    unsigned char raw[sizeof(T)];
    std::memcpy(raw, &value, sizeof(T));
    for (std::size_t i = 0; i < sizeof(T) / 2; ++i) std::swap(raw[i], raw[sizeof(T) - 1 - i]);
    std::memcpy(&value, raw, sizeof(T));
  }
  return value;
}

// A float with `exponent_bits` and `mantissa_bits` (IEEE layout), exactly.
double small_float(std::uint32_t bits, int exponent_bits, int mantissa_bits, bool has_infinity) {
  const std::uint32_t mantissa = bits & ((1u << mantissa_bits) - 1);
  const std::uint32_t exponent = (bits >> mantissa_bits) & ((1u << exponent_bits) - 1);
  const bool negative = (bits >> (mantissa_bits + exponent_bits)) & 1u;
  const int bias = (1 << (exponent_bits - 1)) - 1;
  const std::uint32_t all_ones = (1u << exponent_bits) - 1;
  double magnitude;
  if (has_infinity && exponent == all_ones) {
    magnitude = mantissa == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else if (!has_infinity && exponent == all_ones && mantissa == (1u << mantissa_bits) - 1) {
    magnitude = std::numeric_limits<double>::quiet_NaN();  // E4M3FN: only S.1111.111 is NaN
  } else if (exponent == 0) {
    magnitude = std::ldexp(static_cast<double>(mantissa), 1 - bias - mantissa_bits);
  } else {
    magnitude = std::ldexp(static_cast<double>(mantissa | (1u << mantissa_bits)),
                           static_cast<int>(exponent) - bias - mantissa_bits);
  }
  return negative ? -magnitude : magnitude;
}

bool in_range(const TensorEntry& entry, std::span<const std::byte> bytes, std::uint64_t index) {
  std::uint64_t count = entry.element_count();
  return index < count && bytes.size() >= entry.size && entry.size / dtype_size(entry.dtype) >= count;
}

std::string shortest(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char text[64];
  auto result = std::to_chars(text, text + sizeof text, value);
  return std::string(text, result.ptr);
}

}  // namespace

double half_to_double(std::uint16_t bits) { return small_float(bits, 5, 10, true); }
double bfloat16_to_double(std::uint16_t bits) { return small_float(bits, 8, 7, true); }
double float8_e4m3_to_double(std::uint8_t bits) { return small_float(bits, 4, 3, false); }
double float8_e5m2_to_double(std::uint8_t bits) { return small_float(bits, 5, 2, true); }
double float8_e8m0_to_double(std::uint8_t bits) {
  return bits == 0xff ? std::numeric_limits<double>::quiet_NaN() : std::ldexp(1.0, static_cast<int>(bits) - 127);
}

double element_as_double(const TensorEntry& entry, std::span<const std::byte> bytes, std::uint64_t index) {
  if (!in_range(entry, bytes, index)) return std::numeric_limits<double>::quiet_NaN();
  switch (entry.dtype) {
    case DType::F64: return load<double>(bytes, index);
    case DType::F32: return static_cast<double>(load<float>(bytes, index));
    case DType::F16: return half_to_double(load<std::uint16_t>(bytes, index));
    case DType::BF16: return bfloat16_to_double(load<std::uint16_t>(bytes, index));
    case DType::F8_E4M3: return float8_e4m3_to_double(load<std::uint8_t>(bytes, index));
    case DType::F8_E5M2: return float8_e5m2_to_double(load<std::uint8_t>(bytes, index));
    case DType::F8_E8M0: return float8_e8m0_to_double(load<std::uint8_t>(bytes, index));
    case DType::I64: return static_cast<double>(load<std::int64_t>(bytes, index));
    case DType::I32: return load<std::int32_t>(bytes, index);
    case DType::I16: return load<std::int16_t>(bytes, index);
    case DType::I8: return load<std::int8_t>(bytes, index);
    case DType::U8: return load<std::uint8_t>(bytes, index);
    case DType::BOOL: return load<std::uint8_t>(bytes, index) != 0 ? 1.0 : 0.0;
    case DType::U16: return load<std::uint16_t>(bytes, index);
    case DType::U32: return load<std::uint32_t>(bytes, index);
    case DType::U64: return static_cast<double>(load<std::uint64_t>(bytes, index));
  }
  return std::numeric_limits<double>::quiet_NaN();
}

std::string element_as_text(const TensorEntry& entry, std::span<const std::byte> bytes, std::uint64_t index) {
  if (!in_range(entry, bytes, index)) return {};
  switch (entry.dtype) {
    case DType::I64: return std::to_string(load<std::int64_t>(bytes, index));
    case DType::U64: return std::to_string(load<std::uint64_t>(bytes, index));
    case DType::BOOL: return load<std::uint8_t>(bytes, index) != 0 ? "true" : "false";
    default:
      if (!dtype_is_float(entry.dtype)) return std::to_string(static_cast<std::int64_t>(element_as_double(entry, bytes, index)));
      return shortest(element_as_double(entry, bytes, index));
  }
}

}  // namespace gpubox::weights
