#include "hooks/spec.h"

#include <algorithm>
#include <fmt/format.h>
#include <fmt/ranges.h>

namespace gpubox::hooks {
namespace {

using nlohmann::json;

Status invalid(std::string message) { return {ErrorCode::invalid_request, std::move(message)}; }

// The part of a hook name after "blocks.N." ("hook_resid_post"), or the whole name.
std::string_view layer_free(std::string_view name) {
  if (name.rfind("blocks.", 0) != 0) return name;
  std::size_t dot = name.find('.', 7);
  return dot == std::string_view::npos ? name : name.substr(dot + 1);
}

// A few valid names to suggest: those with the same suffix as name, else the first ones.
std::string suggestions(const std::string& name, const std::vector<std::string>& hook_names) {
  constexpr std::size_t few = 6;
  std::vector<std::string> picked;
  for (const auto& valid : hook_names) {
    if (picked.size() < few && layer_free(valid) == layer_free(name)) picked.push_back(valid);
  }
  for (std::size_t i = 0; picked.empty() && i < std::min(few, hook_names.size()); ++i) picked.push_back(hook_names[i]);
  return fmt::format("valid names include {} ({} in all: model.hooks lists them)", fmt::join(picked, ", "), hook_names.size());
}

Result<Capture> decode_capture(const json& op, const std::string& where, const std::vector<std::string>& hook_names,
                               std::int64_t tokens) {
  Capture capture;
  for (const auto& [key, value] : op.items()) {
    if (key != "op" && key != "hook" && key != "positions" && key != "dtype") {
      return invalid(fmt::format("{}: unknown field \"{}\" (capture takes hook, positions, dtype)", where, key));
    }
  }
  auto hook = op.find("hook");
  if (hook == op.end() || !hook->is_string()) return invalid(fmt::format("{}.hook: expected a hook name (a string)", where));
  capture.hook = hook->get<std::string>();
  if (std::find(hook_names.begin(), hook_names.end(), capture.hook) == hook_names.end()) {
    return invalid(fmt::format("{}.hook: this model has no hook point \"{}\"; {}", where, capture.hook,
                               suggestions(capture.hook, hook_names)));
  }
  if (auto positions = op.find("positions"); positions != op.end()) {
    if (!positions->is_array() || positions->empty()) {
      return invalid(fmt::format("{}.positions: expected a non-empty list of integers", where));
    }
    for (const auto& p : *positions) {
      if (!p.is_number_integer()) return invalid(fmt::format("{}.positions: {} is not an integer", where, p.dump()));
      std::int64_t index = p.is_number_unsigned() && p.get<std::uint64_t>() > INT64_MAX ? INT64_MAX : p.get<std::int64_t>();
      if (index < -tokens || index >= tokens) {
        return invalid(fmt::format("{}.positions: {} is out of range for {} tokens (valid: {} to {})", where,
                                   p.dump(), tokens, -tokens, tokens - 1));
      }
      capture.positions.push_back(index < 0 ? index + tokens : index);
    }
  }
  if (auto dtype = op.find("dtype"); dtype != op.end()) {
    if (*dtype == "float32") {
      capture.dtype = CaptureDtype::float32;
    } else if (*dtype == "model") {
      capture.dtype = CaptureDtype::model;
    } else {
      return invalid(fmt::format("{}.dtype: {} is not \"float32\" or \"model\"", where, dtype->dump()));
    }
  }
  return capture;
}

}  // namespace

Result<Plan> decode_plan(const json& ops, const std::vector<std::string>& hook_names, std::int64_t tokens) {
  Plan plan;
  if (ops.is_null()) return plan;
  if (!ops.is_array()) return invalid("params.ops: expected a list of operations");
  for (std::size_t i = 0; i < ops.size(); ++i) {
    std::string where = fmt::format("params.ops[{}]", i);
    const json& op = ops[i];
    if (!op.is_object()) return invalid(fmt::format("{}: expected an object {{\"op\": ..., \"hook\": ...}}", where));
    auto kind = op.find("op");
    if (kind == op.end() || !kind->is_string()) return invalid(fmt::format("{}.op: expected an operation name", where));
    if (*kind != "capture") {
      return invalid(fmt::format("{}.op: unknown operation {} (supported: capture)", where, kind->dump()));
    }
    auto capture = decode_capture(op, where, hook_names, tokens);
    if (!capture) return capture.status();
    plan.captures.push_back(std::move(*capture));
  }
  return plan;
}

}  // namespace gpubox::hooks
