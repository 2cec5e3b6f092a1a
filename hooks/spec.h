// The intervention spec: a request's list of operations at named hook points,
// decoded and checked into a Plan before anything runs. No LibTorch: the model
// host, the fuzz target and (later) the Python toolkit share it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hooks/tensor_arg.h"
#include "base/status.h"

namespace gpubox::hooks {

// A hook point as one request sees it: its concrete shape (batch and
// positions filled in) and the axes that rows, positions and heads select.
struct HookShape {
  std::string name;
  std::vector<std::int64_t> dims;
  int position_axis = 1;  // "pos", or "query_pos" for attention scores and patterns
  int head_axis = -1;     // -1: the point has no heads axis
};

enum class OpKind {
  capture, set, add, scale, zero, mean, project_out, patch, capture_grad,
  fn,           // the caller's TorchScript function (model/modeld/interventions/user_fn.h) on the selected part
  // On a loaded SAE's features (saes given to decode_plan):
  sae_capture,  // feature activations, dense or the top k per position
  sae_steer,    // add scale × W_dec[f] for each feature f
  sae_ablate,   // features zeroed, decoded, the SAE's error added back
  sae_set,      // features set to values, decoded, the error added back
  sae_splice,   // the activation replaced by the SAE's reconstruction (no error term); the last: is_sae()
};

// An SAE a request may name (model.sae_load): the hook it reads and its widths.
struct SaeShape {
  std::string name;
  std::string hook;
  std::int64_t d_in = 0;
  std::int64_t d_sae = 0;
};
enum class CaptureDtype { float32, model };

// The part of a hook point's value an operation touches; an empty list selects the whole axis.
// Indices are normalized (no negatives), in request order.
struct Selection {
  std::vector<std::int64_t> rows;       // axis 0 (batch)
  std::vector<std::int64_t> positions;  // the position axis
  std::vector<std::int64_t> heads;      // the heads axis (only where the point has one)
  bool all() const { return rows.empty() && positions.empty() && heads.empty(); }
};

// One operation at one hook point, checked against that point's shape.
struct Op {
  std::size_t index = 0;  // its place in the request's ops
  OpKind kind = OpKind::capture;
  std::string hook;
  std::size_t point = 0;  // index into decode_plan's points
  Selection where;
  CaptureDtype dtype = CaptureDtype::float32;  // capture
  double factor = 1.0;                         // add: the vector's scale; scale: the factor
  std::optional<TensorArg> tensor;             // set, mean, patch: the value; add: the vector; project_out: the direction
  std::string tensor_field;                    // the op's field that holds tensor ("value", "vector", "direction")
  std::optional<std::int64_t> from_row;        // patch: the batch row to copy from (normalized)
  bool allow_nonfinite = false;                // the tensor (fn: the result) may hold NaN or infinities (check_finite passes it)
  // SAE ops:
  std::size_t sae = 0;                  // index into decode_plan's saes
  std::vector<std::int64_t> features;   // sae_steer, sae_ablate, sae_set: in [0, d_sae), request order
  std::vector<double> values;           // sae_set: one per feature
  std::int64_t top_k = 0;               // sae_capture: 0 for dense
  // fn: the function, by the name model.fn_load gave it, or the attachment holding its TorchScript archive
  std::string fn_name;
  std::optional<std::size_t> fn_attachment;
  std::vector<std::pair<std::string, TensorArg>> extra;  // fn: the named tensors passed with the activation
  bool is_sae() const { return kind >= OpKind::sae_capture; }
  // The tensors a capture op sends back: 1, or 2 for sae_capture with top_k (indices, values); 0 for edits.
  std::size_t capture_outputs() const;
};

// What a request asks for, validated against one model and one input.
struct Plan {
  std::vector<Op> ops;  // in request order, the order they apply in
  bool empty() const { return ops.empty(); }
  std::size_t capture_count() const;  // capture and sae_capture ops
  std::size_t grad_count() const;  // capture_grad ops: the pass needs autograd
};

// Decodes ops (params.ops: a list of {"op", "hook", "rows"?, "positions"?, "heads"?, ...})
// against the hook points of one model and input and the sizes of the
// request's attachments (the tensors ops name). A negative index counts from
// the end. An error is invalid_request naming the op and field
// ("params.ops[1].hook") and, for an unknown hook, a few of the valid names.
// With active given (one flag per op), the ops it marks false are skipped:
// neither checked nor in the plan (model.generate's ops for other passes).
// saes: the SAEs sae_* ops may name ("sae": name); an SAE op's hook defaults to its SAE's.
Result<Plan> decode_plan(const nlohmann::json& ops, const std::vector<HookShape>& points,
                         const std::vector<std::size_t>& attachment_bytes, const std::vector<bool>& active = {},
                         const std::vector<SaeShape>& saes = {});

// The name a capture's tensor is sent under: the hook for capture; for
// sae_capture "sae:NAME" (dense), or "sae:NAME:indices" / "sae:NAME:values"
// (output 0 / 1 of a top-k capture).
std::string capture_name(const Op& op, const std::vector<SaeShape>& saes, std::size_t output = 0);

// invalid_request naming the op's field and the first element that is NaN or
// infinite, for the first op of plan whose tensor holds one and does not say
// "allow_nonfinite": true (a NaN steering vector makes every later position's
// logits NaN). attachments: the bytes of the request's attachments.
Status check_finite(const Plan& plan, const std::vector<std::string_view>& attachments);

}  // namespace gpubox::hooks
