#include "model/modeld/decoder/head_results.h"

#include <ATen/ATen.h>

namespace gpubox::modeld {

at::Tensor head_results(const at::Tensor& z, const at::Tensor& o_w, WeightLayout layout) {
  std::int64_t heads = z.size(2), d_head = z.size(3);
  // [heads, d_head, d_model], as TransformerLens' W_O.
  at::Tensor w_o = layout == WeightLayout::in_out ? o_w.reshape({heads, d_head, -1})
                                                  : o_w.reshape({-1, heads, d_head}).permute({1, 2, 0});
  return at::einsum("bphd,hdm->bphm", {z, w_o});
}

at::Tensor output_of_results(const at::Tensor& results, const at::Tensor& o_b, const at::Tensor& residual) {
  at::Tensor out = results.sum(2);
  if (o_b.defined()) out = out + o_b;
  return residual.defined() ? residual + out : out;
}

at::Tensor hooked_results(int layer, const at::Tensor& z, const at::Tensor& o_w, const at::Tensor& o_b, WeightLayout layout,
                          const std::vector<HookedRows>& requests, const at::Tensor& residual, const at::Tensor& out) {
  std::vector<at::Tensor> pieces;
  bool replaced = false;
  for (const auto& request : requests) {
    at::Tensor piece = out.narrow(0, request.first_row, request.rows);
    if (request.hooks && request.hooks->wants(HookPoint::result, layer)) {
      at::Tensor results = head_results(z.narrow(0, request.first_row, request.rows), o_w, layout);
      at::Tensor seen = results;
      request.hooks->apply(HookPoint::result, layer, results);
      if (!results.is_same(seen)) {
        at::Tensor rows_residual = residual.defined() ? residual.narrow(0, request.first_row, request.rows) : at::Tensor();
        piece = output_of_results(results, o_b, rows_residual);
        replaced = true;
      }
    }
    pieces.push_back(piece);
  }
  if (!replaced) return out;
  return pieces.size() == 1 ? pieces[0] : at::cat(pieces, 0);
}

}  // namespace gpubox::modeld
