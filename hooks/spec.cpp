#include "hooks/spec.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <set>
#include <string_view>

namespace gpubox::hooks {
namespace {

using nlohmann::json;

struct OpRule {
  OpKind kind;
  std::string_view name;
  std::set<std::string_view> fields;  // beyond op, hook, rows, positions, heads
};

const std::array<OpRule, 15> kRules = {{
    {OpKind::capture, "capture", {"dtype"}},
    {OpKind::set, "set", {"value", "allow_nonfinite"}},
    {OpKind::add, "add", {"vector", "scale", "allow_nonfinite"}},
    {OpKind::scale, "scale", {"factor"}},
    {OpKind::zero, "zero", {}},
    {OpKind::mean, "mean", {"value", "allow_nonfinite"}},
    {OpKind::project_out, "project_out", {"direction", "allow_nonfinite"}},
    {OpKind::patch, "patch", {"value", "from_row", "allow_nonfinite"}},
    {OpKind::capture_grad, "capture_grad", {}},
    {OpKind::sae_capture, "sae_capture", {"sae", "top_k"}},
    {OpKind::sae_steer, "sae_steer", {"sae", "features", "scale"}},
    {OpKind::sae_ablate, "sae_ablate", {"sae", "features"}},
    {OpKind::sae_set, "sae_set", {"sae", "features", "values"}},
    {OpKind::sae_splice, "sae_splice", {"sae"}},
    {OpKind::fn, "fn", {"fn", "extra", "allow_nonfinite"}},
}};

std::string op_names() {
  std::vector<std::string_view> names;
  for (const auto& rule : kRules) names.push_back(rule.name);
  return fmt::format("{}", fmt::join(names, ", "));
}

// The fewest single-character insertions, deletions and substitutions that turn a into b.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The valid names nearest to name (by edit distance; the model's order breaks ties).
std::string suggestions(const std::string& name, const std::vector<HookShape>& points) {
  constexpr std::size_t few = 3;
  std::vector<std::pair<std::size_t, std::size_t>> ranked;  // (distance, index)
  for (std::size_t i = 0; i < points.size(); ++i) ranked.emplace_back(edit_distance(name, points[i].name), i);
  std::size_t shown = std::min(few, ranked.size());
  std::partial_sort(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(shown), ranked.end());
  std::vector<std::string_view> picked;
  for (std::size_t i = 0; i < shown; ++i) picked.push_back(points[ranked[i].second].name);
  return fmt::format("the nearest valid names are {} ({} in all: model.hooks lists them)", fmt::join(picked, ", "), points.size());
}

// Reads one index in [-size, size) at field, normalized to [0, size).
Result<std::int64_t> read_index(const json& value, const std::string& field, std::int64_t size, const char* axis) {
  if (!value.is_number_integer()) return Status::invalid_request(fmt::format("{}: {} is not an integer", field, value.dump()));
  std::int64_t index = value.is_number_unsigned() && value.get<std::uint64_t>() > INT64_MAX ? INT64_MAX : value.get<std::int64_t>();
  if (index < -size || index >= size) {
    return Status::invalid_request(fmt::format("{}: {} is out of range for {} {} (valid: {} to {})", field, value.dump(), size, axis,
                               -size, size - 1));
  }
  return index < 0 ? index + size : index;
}

// Reads op[key], a non-empty list of indices along an axis of size size, into out.
Status read_indices(const json& op, const char* key, const std::string& where, std::int64_t size, const char* axis,
                    std::vector<std::int64_t>& out) {
  auto list = op.find(key);
  if (list == op.end()) return {};
  std::string field = fmt::format("{}.{}", where, key);
  if (!list->is_array() || list->empty()) return Status::invalid_request(fmt::format("{}: expected a non-empty list of integers", field));
  for (const auto& value : *list) {
    auto index = read_index(value, field, size, axis);
    if (!index) return index.status();
    out.push_back(*index);
  }
  return {};
}

Result<double> read_number(const json& op, const char* key, const std::string& where, double fallback) {
  auto value = op.find(key);
  if (value == op.end()) return fallback;
  if (!value->is_number() || !std::isfinite(value->get<double>())) {
    return Status::invalid_request(fmt::format("{}.{}: expected a finite number", where, key));
  }
  return value->get<double>();
}

// The shape of the part of point's value that where selects.
std::vector<std::int64_t> region_shape(const HookShape& point, const Selection& where) {
  std::vector<std::int64_t> shape = point.dims;
  if (!where.rows.empty()) shape[0] = static_cast<std::int64_t>(where.rows.size());
  if (!where.positions.empty()) shape[static_cast<std::size_t>(point.position_axis)] = static_cast<std::int64_t>(where.positions.size());
  if (!where.heads.empty()) shape[static_cast<std::size_t>(point.head_axis)] = static_cast<std::int64_t>(where.heads.size());
  return shape;
}

// Reads the tensor op[key] and checks it fits the region it is for.
Status read_tensor(const json& op, const char* key, const std::string& where, const HookShape& point, Op& out,
                   const std::vector<std::size_t>& attachment_bytes) {
  std::string field = fmt::format("{}.{}", where, key);
  if (auto allow = op.find("allow_nonfinite"); allow != op.end()) {
    if (!allow->is_boolean()) return Status::invalid_request(fmt::format("{}.allow_nonfinite: expected true or false", where));
    out.allow_nonfinite = allow->get<bool>();
  }
  auto arg = decode_tensor_arg(op.at(key), field, attachment_bytes);
  if (!arg) return arg.status();
  std::vector<std::int64_t> region = region_shape(point, out.where);
  if (out.kind == OpKind::project_out) {
    if (arg->shape != std::vector<std::int64_t>{point.dims.back()}) {
      return Status::invalid_request(fmt::format("{}: a direction of {} has shape [{}]; this one is {}", field, point.name,
                                 point.dims.back(), shape_text(arg->shape)));
    }
  } else if (!broadcasts_to(arg->shape, region)) {
    return Status::invalid_request(fmt::format("{}: shape {} does not broadcast to the selected part of {}, {}", field,
                               shape_text(arg->shape), point.name, shape_text(region)));
  }
  out.tensor = std::move(*arg);
  out.tensor_field = key;
  return {};
}

// fn's fields: "fn", a loaded function's name or {"attachment": i} (a TorchScript archive sent with the call),
// "extra", {name: tensor descriptor} (any shapes: the function's to check), and "allow_nonfinite" (its result may hold NaN
// or infinities; checked where it runs).
Status read_fn(const json& op, const std::string& where, const std::vector<std::size_t>& attachment_bytes, Op& out) {
  auto fn = op.find("fn");
  std::string field = where + ".fn";
  if (fn != op.end() && fn->is_string() && !fn->get<std::string>().empty()) {
    out.fn_name = fn->get<std::string>();
  } else if (fn != op.end() && fn->is_object() && fn->size() == 1 && fn->contains("attachment")) {
    const json& index = fn->at("attachment");
    if (!index.is_number_unsigned() || index.get<std::uint64_t>() >= attachment_bytes.size()) {
      return Status::invalid_request(fmt::format("{}.attachment: {} is not an attachment of this call ({} sent)", field, index.dump(),
                                 attachment_bytes.size()));
    }
    out.fn_attachment = static_cast<std::size_t>(index.get<std::uint64_t>());
    if (attachment_bytes[*out.fn_attachment] == 0) return Status::invalid_request(fmt::format("{}.attachment: the attachment is empty", field));
  } else {
    return Status::invalid_request(fmt::format("{}: expected a loaded function's name (model.fn_load) or {{\"attachment\": i}} "
                               "(a torch.jit.save archive sent with the call)", field));
  }
  if (auto allow = op.find("allow_nonfinite"); allow != op.end()) {
    if (!allow->is_boolean()) return Status::invalid_request(fmt::format("{}.allow_nonfinite: expected true or false", where));
    out.allow_nonfinite = allow->get<bool>();
  }
  auto extra = op.find("extra");
  if (extra == op.end()) return {};
  if (!extra->is_object()) return Status::invalid_request(fmt::format("{}.extra: expected {{name: tensor, ...}}", where));
  for (const auto& [name, descriptor] : extra->items()) {
    auto arg = decode_tensor_arg(descriptor, fmt::format("{}.extra.{}", where, name), attachment_bytes);
    if (!arg) return arg.status();
    out.extra.emplace_back(name, std::move(*arg));
  }
  return {};
}

Status check_fields(const json& op, const OpRule& rule, const std::string& where) {
  for (const auto& [key, value] : op.items()) {
    bool common = key == "op" || key == "hook" || key == "rows" || key == "positions" || key == "heads";
    if (!common && rule.fields.count(key) == 0) {
      std::vector<std::string_view> takes = {"hook", "rows", "positions", "heads"};
      takes.insert(takes.end(), rule.fields.begin(), rule.fields.end());
      return Status::invalid_request(fmt::format("{}: unknown field \"{}\" ({} takes {})", where, key, rule.name, fmt::join(takes, ", ")));
    }
  }
  return {};
}

// The SAE an sae_* op names (op["sae"]), and its hook as the op's default hook.
Status read_sae(const json& op, const std::string& where, const std::vector<SaeShape>& saes, Op& out) {
  auto name = op.find("sae");
  if (name == op.end() || !name->is_string()) return Status::invalid_request(fmt::format("{}.sae: expected the name of a loaded SAE", where));
  auto found = std::find_if(saes.begin(), saes.end(), [&](const SaeShape& s) { return s.name == name->get<std::string>(); });
  if (found == saes.end()) {
    std::vector<std::string_view> names;
    for (const auto& s : saes) names.push_back(s.name);
    return Status::invalid_request(fmt::format("{}.sae: this model has no SAE {} (loaded: {}; model.sae_load loads one)", where, name->dump(),
                               names.empty() ? std::string("none") : fmt::format("{}", fmt::join(names, ", "))));
  }
  out.sae = static_cast<std::size_t>(found - saes.begin());
  auto hook = op.find("hook");
  if (hook != op.end() && (!hook->is_string() || hook->get<std::string>() != found->hook)) {
    return Status::invalid_request(fmt::format("{}.hook: SAE \"{}\" reads {}, not {}", where, found->name, found->hook, hook->dump()));
  }
  out.hook = found->hook;
  return {};
}

// op["features"]: a non-empty list of feature indices of an SAE d_sae wide.
Status read_features(const json& op, const std::string& where, std::int64_t d_sae, Op& out) {
  auto list = op.find("features");
  std::string field = where + ".features";
  if (list == op.end() || !list->is_array() || list->empty()) {
    return Status::invalid_request(fmt::format("{}: expected a non-empty list of feature indices", field));
  }
  for (const auto& value : *list) {
    auto index = read_index(value, field, d_sae, "SAE features");
    if (!index) return index.status();
    out.features.push_back(*index);
  }
  return {};
}

// The fields of an sae_* op beyond sae and hook, checked against its SAE and point.
Status decode_sae_fields(const json& op, const std::string& where, const SaeShape& sae, const HookShape& point, Op& out) {
  if (point.dims.back() != sae.d_in) {
    return Status::invalid_request(fmt::format("{}.sae: SAE \"{}\" is {} wide (d_in), {} is {} wide", where, sae.name, sae.d_in, point.name,
                               point.dims.back()));
  }
  switch (out.kind) {
    case OpKind::sae_capture:
      if (auto k = op.find("top_k"); k != op.end()) {
        if (!k->is_number_integer() || k->get<std::int64_t>() < 1 || k->get<std::int64_t>() > sae.d_sae) {
          return Status::invalid_request(fmt::format("{}.top_k: expected an integer from 1 to d_sae ({}), got {}", where, sae.d_sae, k->dump()));
        }
        out.top_k = k->get<std::int64_t>();
      }
      return {};
    case OpKind::sae_steer: {
      if (Status s = read_features(op, where, sae.d_sae, out); !s) return s;
      auto scale = read_number(op, "scale", where, 1.0);
      if (!scale) return scale.status();
      out.factor = *scale;
      return {};
    }
    case OpKind::sae_ablate: return read_features(op, where, sae.d_sae, out);
    case OpKind::sae_set: {
      if (Status s = read_features(op, where, sae.d_sae, out); !s) return s;
      auto values = op.find("values");
      std::string field = where + ".values";
      if (values == op.end()) return Status::invalid_request(fmt::format("{}: sae_set needs a number, or one per feature", field));
      std::vector<json> given = values->is_array() ? values->get<std::vector<json>>() : std::vector<json>(out.features.size(), *values);
      if (given.size() != out.features.size()) {
        return Status::invalid_request(fmt::format("{}: {} values for {} features", field, given.size(), out.features.size()));
      }
      for (const auto& value : given) {
        if (!value.is_number() || !std::isfinite(value.get<double>())) return Status::invalid_request(fmt::format("{}: expected finite numbers", field));
        out.values.push_back(value.get<double>());
      }
      return {};
    }
    default: return {};
  }
}

Result<Op> decode_op(const json& op, const std::string& where, const std::vector<HookShape>& points,
                     const std::vector<std::size_t>& attachment_bytes, const std::vector<SaeShape>& saes) {
  if (!op.is_object()) return Status::invalid_request(fmt::format("{}: expected an object {{\"op\": ..., \"hook\": ...}}", where));
  auto kind = op.find("op");
  if (kind == op.end() || !kind->is_string()) return Status::invalid_request(fmt::format("{}.op: expected an operation name", where));
  auto rule = std::find_if(kRules.begin(), kRules.end(), [&](const OpRule& r) { return r.name == kind->get<std::string>(); });
  if (rule == kRules.end()) return Status::invalid_request(fmt::format("{}.op: unknown operation {} (supported: {})", where, kind->dump(), op_names()));
  if (Status s = check_fields(op, *rule, where); !s) return s;

  Op out;
  out.kind = rule->kind;
  if (out.is_sae()) {
    if (Status s = read_sae(op, where, saes, out); !s) return s;
  } else {
    auto hook = op.find("hook");
    if (hook == op.end() || !hook->is_string()) return Status::invalid_request(fmt::format("{}.hook: expected a hook name (a string)", where));
    out.hook = hook->get<std::string>();
  }
  auto point = std::find_if(points.begin(), points.end(), [&](const HookShape& p) { return p.name == out.hook; });
  if (point == points.end()) {
    return Status::invalid_request(fmt::format("{}.hook: this model has no hook point \"{}\"; {}", where, out.hook, suggestions(out.hook, points)));
  }
  out.point = static_cast<std::size_t>(point - points.begin());

  if (Status s = read_indices(op, "rows", where, point->dims[0], "batch rows", out.where.rows); !s) return s;
  auto positions_axis = static_cast<std::size_t>(point->position_axis);
  if (Status s = read_indices(op, "positions", where, point->dims[positions_axis], "positions", out.where.positions); !s) return s;
  if (op.contains("heads") && point->head_axis < 0) {
    return Status::invalid_request(fmt::format("{}.heads: {} has no heads axis (heads select in attn.hook_q/k/v/z/result, rot_q/k, attn_scores, pattern)",
                               where, out.hook));
  }
  if (point->head_axis >= 0) {
    auto heads = static_cast<std::size_t>(point->head_axis);
    if (Status s = read_indices(op, "heads", where, point->dims[heads], "heads", out.where.heads); !s) return s;
  }

  if (out.is_sae()) {
    if (Status s = decode_sae_fields(op, where, saes[out.sae], *point, out); !s) return s;
    return out;
  }
  switch (out.kind) {
    case OpKind::capture:
      if (auto dtype = op.find("dtype"); dtype != op.end()) {
        if (*dtype == "float32") {
          out.dtype = CaptureDtype::float32;
        } else if (*dtype == "model") {
          out.dtype = CaptureDtype::model;
        } else {
          return Status::invalid_request(fmt::format("{}.dtype: {} is not \"float32\" or \"model\"", where, dtype->dump()));
        }
      }
      break;
    case OpKind::set:
    case OpKind::mean:
      if (!op.contains("value")) return Status::invalid_request(fmt::format("{}.value: {} needs a tensor", where, rule->name));
      if (Status s = read_tensor(op, "value", where, *point, out, attachment_bytes); !s) return s;
      break;
    case OpKind::add: {
      if (!op.contains("vector")) return Status::invalid_request(fmt::format("{}.vector: add needs a tensor", where));
      if (Status s = read_tensor(op, "vector", where, *point, out, attachment_bytes); !s) return s;
      auto scale = read_number(op, "scale", where, 1.0);
      if (!scale) return scale.status();
      out.factor = *scale;
      break;
    }
    case OpKind::scale: {
      if (!op.contains("factor")) return Status::invalid_request(fmt::format("{}.factor: scale needs a number", where));
      auto factor = read_number(op, "factor", where, 1.0);
      if (!factor) return factor.status();
      out.factor = *factor;
      break;
    }
    case OpKind::fn:
      if (Status s = read_fn(op, where, attachment_bytes, out); !s) return s;
      break;
    case OpKind::zero:
    case OpKind::capture_grad:
    default:
      break;
    case OpKind::project_out:
      if (!op.contains("direction")) return Status::invalid_request(fmt::format("{}.direction: project_out needs a tensor", where));
      if (Status s = read_tensor(op, "direction", where, *point, out, attachment_bytes); !s) return s;
      break;
    case OpKind::patch:
      if (op.contains("value") == op.contains("from_row")) {
        return Status::invalid_request(fmt::format("{}: patch takes either value (a tensor) or from_row (a batch row), not both or neither", where));
      }
      if (op.contains("value")) {
        if (Status s = read_tensor(op, "value", where, *point, out, attachment_bytes); !s) return s;
      } else {
        auto row = read_index(op.at("from_row"), where + ".from_row", point->dims[0], "batch rows");
        if (!row) return row.status();
        out.from_row = *row;
      }
      break;
  }
  return out;
}

}  // namespace

std::size_t Plan::grad_count() const {
  return static_cast<std::size_t>(std::count_if(ops.begin(), ops.end(), [](const Op& op) { return op.kind == OpKind::capture_grad; }));
}

std::size_t Plan::capture_count() const {
  return static_cast<std::size_t>(std::count_if(ops.begin(), ops.end(), [](const Op& op) {
    return op.kind == OpKind::capture || op.kind == OpKind::sae_capture;
  }));
}

std::size_t Op::capture_outputs() const {
  if (kind == OpKind::capture) return 1;
  if (kind == OpKind::sae_capture) return top_k > 0 ? 2 : 1;
  return 0;
}

std::string capture_name(const Op& op, const std::vector<SaeShape>& saes, std::size_t output) {
  if (op.kind != OpKind::sae_capture) return op.hook;
  std::string name = "sae:" + (op.sae < saes.size() ? saes[op.sae].name : std::string("?"));
  if (op.top_k == 0) return name;
  return name + (output == 0 ? ":indices" : ":values");
}

Result<Plan> decode_plan(const json& ops, const std::vector<HookShape>& points, const std::vector<std::size_t>& attachment_bytes,
                         const std::vector<bool>& active, const std::vector<SaeShape>& saes) {
  Plan plan;
  if (ops.is_null()) return plan;
  if (!ops.is_array()) return Status::invalid_request("params.ops: expected a list of operations");
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (i < active.size() && !active[i]) continue;
    auto op = decode_op(ops[i], fmt::format("params.ops[{}]", i), points, attachment_bytes, saes);
    if (!op) return op.status();
    op->index = i;
    plan.ops.push_back(std::move(*op));
  }
  return plan;
}

Status check_finite(const Plan& plan, const std::vector<std::string_view>& attachments) {
  for (const auto& op : plan.ops) {
    if (!op.tensor || op.allow_nonfinite || op.tensor->attachment >= attachments.size()) continue;
    auto bad = first_nonfinite(*op.tensor, attachments[op.tensor->attachment]);
    if (!bad) continue;
    return Status::invalid_request(fmt::format("params.ops[{}].{}: element {} is {}; tensors must be finite "
                               "(\"allow_nonfinite\": true on the op sends it anyway)",
                               op.index, op.tensor_field, shape_text(bad->index), bad->what));
  }
  return {};
}

}  // namespace gpubox::hooks
