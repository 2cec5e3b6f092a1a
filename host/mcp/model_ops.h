// run_model's and generate's interventions as an MCP client gives them (JSON:
// a tensor field as a number or nested lists of numbers, an fn op naming a
// function loaded with model.fn_load) made into the model host's wire ops
// (hooks/README.md): each tensor a float32 attachment of the call, the tool's
// `captures` appended as capture ops. Pure; any thread.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"

namespace gpubox::mcp {

struct WireOps {
  nlohmann::json ops = nlohmann::json::array();
  std::vector<std::string> attachments;  // raw little-endian float32 bytes, one per tensor field
  std::size_t user_ops = 0;              // ops[0..user_ops) are the caller's `ops`, the rest its `captures`
};

// ops: the tool's `ops` (may be null); captures: hook names; positions: applied to each capture (may be null).
// invalid_request naming the argument (`ops[2].vector: ...`) for what cannot become a wire op.
Result<WireOps> encode_model_ops(const nlohmann::json& ops, const nlohmann::json& captures, const nlohmann::json& positions);

// The model host's refusal of params.ops[i] in the tool's names: ops[i], or captures[j] for a capture op.
std::string ops_in_tool_words(std::string message, std::size_t user_ops);

}  // namespace gpubox::mcp
