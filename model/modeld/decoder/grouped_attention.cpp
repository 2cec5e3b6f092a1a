#include "model/modeld/decoder/grouped_attention.h"

#include <ATen/ATen.h>

namespace gpubox::modeld {

at::Tensor folded_decode_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const at::Tensor& mask, std::optional<double> scale) {
  std::int64_t rows = q.size(0), heads = q.size(1), d = q.size(3), kv_heads = k.size(1);
  TORCH_CHECK(q.size(2) == 1 && heads % kv_heads == 0, "folded attention: one query token, whole groups of heads");
  // [rows, heads, 1, d] → [rows, kv_heads, group, d]: query head kv_head * group + g is row g of its key head.
  at::Tensor folded = q.reshape({rows, kv_heads, heads / kv_heads, d});
  at::Tensor z = at::scaled_dot_product_attention(folded, k, v, mask, 0.0, false, scale, false);
  return z.reshape({rows, heads, 1, d});
}

}  // namespace gpubox::modeld
