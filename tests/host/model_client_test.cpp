// host/model_client.h's Tensor: element access for every dtype modeld sends.
#include "host/model_client.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

namespace gpubox::host {
namespace {

Tensor tensor_of(const std::string& dtype, const void* bytes, std::size_t size) {
  Tensor tensor;
  tensor.dtype = dtype;
  tensor.data = zmq::message_t(bytes, size);
  return tensor;
}

TEST(ModelClientTensor, ReadsEachDtype) {
  const float f32[] = {1.5f, -2.25f};
  Tensor a = tensor_of("float32", f32, sizeof f32);
  EXPECT_EQ(a.elements(), 2u);
  EXPECT_EQ(a.at(1), -2.25);

  const std::uint16_t bf16[] = {0x3fc0, 0xc010};  // 1.5, -2.25: the top halves of the float32s
  Tensor b = tensor_of("bfloat16", bf16, sizeof bf16);
  EXPECT_EQ(b.elements(), 2u);
  EXPECT_EQ(b.at(0), 1.5);
  EXPECT_EQ(b.at(1), -2.25);

  const std::uint16_t f16[] = {0x3e00, 0xc080, 0x0001, 0x7c00};  // 1.5, -2.25, the smallest subnormal, +inf
  Tensor h = tensor_of("float16", f16, sizeof f16);
  EXPECT_EQ(h.at(0), 1.5);
  EXPECT_EQ(h.at(1), -2.25);
  EXPECT_FLOAT_EQ(static_cast<float>(h.at(2)), 5.9604645e-8f);
  EXPECT_TRUE(std::isinf(h.at(3)));

  const std::int64_t i64[] = {7, -3};
  Tensor i = tensor_of("int64", i64, sizeof i64);
  EXPECT_EQ(i.at(0), 7);
  EXPECT_EQ(i.at(1), -3);
}

}  // namespace
}  // namespace gpubox::host
