// The intervention spec: a request's list of operations at named hook points,
// decoded and checked into a Plan before anything runs. No LibTorch: the model
// host, the fuzz target and (later) the Python toolkit share it. This stage
// knows one operation, capture.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "rpc/status.h"

namespace gpubox::hooks {

enum class CaptureDtype { float32, model };

// One capture: the activation at hook, optionally only some positions (indices
// of the padded position axis, in [0, tokens)), returned as a tensor.
struct Capture {
  std::string hook;
  std::vector<std::int64_t> positions;  // empty: every position; else normalized (no negatives), in request order
  CaptureDtype dtype = CaptureDtype::float32;
};

// What a request asks for, validated against one model and one input.
struct Plan {
  std::vector<Capture> captures;
  bool empty() const { return captures.empty(); }
};

// Decodes ops (params.ops: a list of {"op": "capture", "hook", "positions"?, "dtype"?})
// against the model's hook names and the request's token count (the padded
// length; a negative position counts from the end). An error is
// invalid_request naming the op and field ("params.ops[1].hook") and, for an
// unknown hook, a few of the valid names.
Result<Plan> decode_plan(const nlohmann::json& ops, const std::vector<std::string>& hook_names, std::int64_t tokens);

}  // namespace gpubox::hooks
