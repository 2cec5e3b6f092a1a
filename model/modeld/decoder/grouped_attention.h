// Grouped-query attention of one query token per row with a mask, laid out
// for the fast kernels: each KV head's query heads folded into the query
// axis, so that the products have as many query heads as key heads and need
// no enable_gqa, which the memory-efficient kernel refuses (and flash refuses
// any mask). The same products and softmax as enable_gqa's, per head.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

namespace gpubox::modeld {

// q [rows, heads, 1, d]; k, v [rows, kv_heads, keys, d] (heads a multiple of
// kv_heads: query head h reads key head h / (heads / kv_heads)); mask
// [rows, 1, 1, keys] bool, true where a key may be seen. z [rows, heads, 1, d].
at::Tensor folded_decode_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const at::Tensor& mask, std::optional<double> scale);

}  // namespace gpubox::modeld
