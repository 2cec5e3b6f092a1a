// folded_decode_attention (model/modeld/decoder/grouped_attention.h) against
// LibTorch's own grouped-query attention (enable_gqa, the math kernel on the
// CPU), in float64: the same products and softmax, so equal to rounding
// (1e-12: the sums run in another order at most).
#include "model/modeld/decoder/grouped_attention.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

namespace gpubox::modeld {
namespace {

void expect_equal_to_gqa(std::int64_t rows, std::int64_t heads, std::int64_t kv_heads, std::int64_t keys) {
  at::manual_seed(7);
  auto options = at::TensorOptions().dtype(at::kDouble);
  std::int64_t d = 8;
  at::Tensor q = at::randn({rows, 1, heads, d}, options).transpose(1, 2);  // as the decoder lays it out
  at::Tensor k = at::randn({rows, kv_heads, keys, d}, options);
  at::Tensor v = at::randn({rows, kv_heads, keys, d}, options);
  at::Tensor mask = at::rand({rows, 1, 1, keys}, options) > 0.3;
  mask.select(3, 0).fill_(true);  // every row sees a key
  at::Tensor expected = at::scaled_dot_product_attention(q, k, v, mask, 0.0, false, 0.25, true);
  at::Tensor folded = folded_decode_attention(q, k, v, mask, 0.25);
  ASSERT_EQ(folded.sizes(), expected.sizes());
  EXPECT_LT((folded - expected).abs().max().item<double>(), 1e-12);
}

TEST(FoldedDecodeAttention, EqualsGroupedQueryAttention) {
  expect_equal_to_gqa(3, 8, 2, 37);   // groups of 4
  expect_equal_to_gqa(1, 32, 8, 16);  // Llama 3 8B's heads
  expect_equal_to_gqa(2, 6, 6, 5);    // no grouping
  expect_equal_to_gqa(2, 7, 1, 9);    // one key head
}

TEST(FoldedDecodeAttention, AMaskedKeyIsNeverRead) {
  auto options = at::TensorOptions().dtype(at::kDouble);
  at::Tensor q = at::randn({1, 4, 1, 8}, options);
  at::Tensor k = at::randn({1, 2, 6, 8}, options), v = at::randn({1, 2, 6, 8}, options);
  at::Tensor mask = at::ones({1, 1, 1, 6}, at::kBool);
  mask.index_put_({0, 0, 0, 5}, false);
  at::Tensor before = folded_decode_attention(q, k, v, mask, std::nullopt);
  v.select(2, 5).fill_(1e6);
  k.select(2, 5).fill_(1e6);
  EXPECT_TRUE(at::equal(before, folded_decode_attention(q, k, v, mask, std::nullopt)));
}

}  // namespace
}  // namespace gpubox::modeld
