// element_as_double / element_as_text: every dtype read exactly, little endian.
#include "model/weights/element.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

namespace gpubox::weights {
namespace {

template <typename T>
std::vector<std::byte> bytes_of(const std::vector<T>& values) {
  std::vector<std::byte> bytes(values.size() * sizeof(T));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

TensorEntry entry_of(DType dtype, std::int64_t count) {
  TensorEntry entry;
  entry.name = "t";
  entry.dtype = dtype;
  entry.shape = {count};
  entry.size = static_cast<std::uint64_t>(count) * dtype_size(dtype);
  return entry;
}

TEST(Element, Half) {
  EXPECT_EQ(half_to_double(0x3c00), 1.0);
  EXPECT_EQ(half_to_double(0xc000), -2.0);
  EXPECT_EQ(half_to_double(0x7bff), 65504.0);
  EXPECT_EQ(half_to_double(0x0001), std::ldexp(1.0, -24));  // smallest subnormal
  EXPECT_EQ(half_to_double(0x3555), 0.333251953125);
  EXPECT_TRUE(std::isinf(half_to_double(0x7c00)));
  EXPECT_TRUE(std::isnan(half_to_double(0x7e00)));
  EXPECT_TRUE(std::signbit(half_to_double(0x8000)));
}

TEST(Element, BFloat16) {
  EXPECT_EQ(bfloat16_to_double(0x3f80), 1.0);
  EXPECT_EQ(bfloat16_to_double(0x3fc0), 1.5);
  EXPECT_EQ(bfloat16_to_double(0xc2f7), -123.5);
  EXPECT_EQ(bfloat16_to_double(0x0001), std::ldexp(1.0, -133));
  EXPECT_TRUE(std::isinf(bfloat16_to_double(0xff80)));
  EXPECT_TRUE(std::isnan(bfloat16_to_double(0x7fc0)));
}

TEST(Element, Float8) {
  EXPECT_EQ(float8_e4m3_to_double(0x38), 1.0);
  EXPECT_EQ(float8_e4m3_to_double(0x7e), 448.0);  // the largest: E4M3FN has no infinity
  EXPECT_EQ(float8_e4m3_to_double(0x78), 256.0);
  EXPECT_EQ(float8_e4m3_to_double(0x01), std::ldexp(1.0, -9));
  EXPECT_TRUE(std::isnan(float8_e4m3_to_double(0x7f)));
  EXPECT_TRUE(std::isnan(float8_e4m3_to_double(0xff)));
  EXPECT_EQ(float8_e5m2_to_double(0x3c), 1.0);
  EXPECT_EQ(float8_e5m2_to_double(0x7b), 57344.0);
  EXPECT_TRUE(std::isinf(float8_e5m2_to_double(0x7c)));
  EXPECT_TRUE(std::isnan(float8_e5m2_to_double(0x7d)));
  EXPECT_EQ(float8_e8m0_to_double(127), 1.0);
  EXPECT_EQ(float8_e8m0_to_double(0), std::ldexp(1.0, -127));
  EXPECT_TRUE(std::isnan(float8_e8m0_to_double(0xff)));
}

TEST(Element, IntegersAndBoolsExactly) {
  auto i64 = bytes_of<std::int64_t>({-5, std::numeric_limits<std::int64_t>::max()});
  EXPECT_EQ(element_as_text(entry_of(DType::I64, 2), i64, 1), "9223372036854775807");
  EXPECT_EQ(element_as_double(entry_of(DType::I64, 2), i64, 0), -5.0);
  auto u64 = bytes_of<std::uint64_t>({std::numeric_limits<std::uint64_t>::max()});
  EXPECT_EQ(element_as_text(entry_of(DType::U64, 1), u64, 0), "18446744073709551615");
  auto i8 = bytes_of<std::int8_t>({-128, 127});
  EXPECT_EQ(element_as_text(entry_of(DType::I8, 2), i8, 0), "-128");
  auto flags = bytes_of<std::uint8_t>({0, 1});
  EXPECT_EQ(element_as_text(entry_of(DType::BOOL, 2), flags, 1), "true");
  EXPECT_EQ(element_as_double(entry_of(DType::BOOL, 2), flags, 0), 0.0);
}

TEST(Element, FloatsAsShortestText) {
  auto f32 = bytes_of<float>({0.1f, -std::numeric_limits<float>::infinity()});
  EXPECT_EQ(element_as_double(entry_of(DType::F32, 2), f32, 0), static_cast<double>(0.1f));
  EXPECT_EQ(element_as_text(entry_of(DType::F32, 2), f32, 0), "0.10000000149011612");
  EXPECT_EQ(element_as_text(entry_of(DType::F32, 2), f32, 1), "-inf");
  auto f64 = bytes_of<double>({0.1});
  EXPECT_EQ(element_as_text(entry_of(DType::F64, 1), f64, 0), "0.1");
}

TEST(Element, OutOfRangeIsNaNAndEmpty) {
  auto f32 = bytes_of<float>({1.0f});
  EXPECT_TRUE(std::isnan(element_as_double(entry_of(DType::F32, 1), f32, 1)));
  EXPECT_EQ(element_as_text(entry_of(DType::F32, 1), f32, 1), "");
  // bytes shorter than the entry says
  EXPECT_TRUE(std::isnan(element_as_double(entry_of(DType::F32, 2), f32, 0)));
}

}  // namespace
}  // namespace gpubox::weights
