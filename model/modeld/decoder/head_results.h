// attn.hook_result: each attention head's share of the output projection
// (TransformerLens' use_attn_result), computed only where a request hooks it,
// and the attention output rebuilt from the shares once a hook edited them.
#pragma once

#include <ATen/core/Tensor.h>
#include <cstdint>
#include <vector>

#include "model/modeld/decoder/cpu_linear.h"
#include "model/modeld/decoder/decoder.h"

namespace gpubox::modeld {

// z [batch, pos, heads, d_head] times each head's rows of W_O: [batch, pos,
// heads, d_model], without b_O (TransformerLens: z[..., h, :] @ W_O[h]).
// o_w: the projection's weight, a Linear's [d_model, heads·d_head] or a
// Conv1D's [heads·d_head, d_model] (layout).
at::Tensor head_results(const at::Tensor& z, const at::Tensor& o_w, WeightLayout layout);

// The attention output from results: their sum over heads, plus o_b and
// residual where defined. It equals the fused projection up to the order of
// float summation (heads summed apart, then b_O and the residual added).
at::Tensor output_of_results(const at::Tensor& results, const at::Tensor& o_b, const at::Tensor& residual);

// One request's rows of a pass and its hooks.
struct HookedRows {
  std::int64_t first_row = 0, rows = 0;
  Hooks* hooks = nullptr;
};

// The attention output of a layer whose attn.hook_result some request hooks:
// out (the fused projection, residual included where defined) except for the
// rows of a request whose hooks replaced its results (an edit, or
// capture_grad's view): there, output_of_results of them. Each request's
// results are computed from its own rows, shaped as in its pass alone; a
// capture changes nothing, bit for bit.
at::Tensor hooked_results(int layer, const at::Tensor& z, const at::Tensor& o_w, const at::Tensor& o_b, WeightLayout layout,
                          const std::vector<HookedRows>& requests, const at::Tensor& residual, const at::Tensor& out);

}  // namespace gpubox::modeld
