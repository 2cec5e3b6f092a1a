// hooks/'s intervention spec decoder (decode_plan), fed a request's ops as one
// JSON document, against a small model's hook names and a token count taken
// from the input's length. A plan it accepts must hold only known names and
// in-range, non-negative positions.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hooks/spec.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::vector<std::string> names = {"hook_embed", "blocks.0.hook_resid_pre", "blocks.0.attn.hook_q",
                                                 "blocks.0.attn.hook_pattern", "blocks.0.hook_resid_post",
                                                 "blocks.1.hook_resid_post", "ln_final.hook_normalized", "logits"};
  auto ops = nlohmann::json::parse(data, data + size, nullptr, false);
  if (ops.is_discarded()) return 0;
  auto tokens = static_cast<std::int64_t>(1 + size % 32);
  auto plan = gpubox::hooks::decode_plan(ops, names, tokens);
  if (!plan) return 0;
  for (const auto& capture : plan->captures) {
    if (std::find(names.begin(), names.end(), capture.hook) == names.end()) __builtin_trap();
    for (auto p : capture.positions) {
      if (p < 0 || p >= tokens) __builtin_trap();
    }
  }
  return 0;
}
