#include "model/modeld/interventions/intervention_hooks.h"

#include <cstdio>

#include <ATen/ATen.h>
#include <ATen/TensorIndexing.h>
#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <map>
#include <optional>

#include "model/modeld/decoder/tensor_wire.h"

namespace gpubox::modeld {
namespace {

using at::indexing::TensorIndex;
using hooks::OpKind;

// Advanced indices selecting where's rows, positions and heads of value: one
// index per leading axis up to the last selected one (the whole axis for the
// others), each shaped to broadcast against the rest, so the selected part
// keeps value's axis order. rows, when given, replaces where's rows. Empty
// when nothing is selected.
std::vector<TensorIndex> selection_index(DeviceIndexCache& cache, const at::Tensor& value, const hooks::Selection& where,
                                         int position_axis, int head_axis, const std::vector<std::int64_t>* rows = nullptr) {
  const std::vector<std::int64_t>& picked_rows = rows ? *rows : where.rows;
  auto picked = [&](int axis) -> const std::vector<std::int64_t>* {
    if (axis == 0 && !picked_rows.empty()) return &picked_rows;
    if (axis == position_axis && !where.positions.empty()) return &where.positions;
    if (axis == head_axis && !where.heads.empty()) return &where.heads;
    return nullptr;
  };
  int last = -1;
  for (int axis = 0; axis < static_cast<int>(value.dim()); ++axis) {
    if (picked(axis)) last = axis;
  }
  std::vector<TensorIndex> index;
  for (int axis = 0; axis <= last; ++axis) {
    std::vector<std::int64_t> view(static_cast<std::size_t>(last + 1), 1);
    view[static_cast<std::size_t>(axis)] = -1;
    const auto* list = picked(axis);
    const at::Tensor& indices = list ? cache.list(*list, value.device()) : cache.arange(value.size(axis), value.device());
    index.emplace_back(indices.view(view));
  }
  return index;
}

// x with its component along direction removed (along the last axis), computed in float32.
at::Tensor project_out(const at::Tensor& x, const at::Tensor& direction) {
  at::Tensor unit = direction.to(at::kFloat);
  unit = unit / unit.norm();
  at::Tensor values = x.to(at::kFloat);
  return (values - (values * unit).sum(-1, true) * unit).to(x.scalar_type());
}

// value with its part at index (all of it when index is empty) replaced by edited (of that part's shape).
void put(at::Tensor& value, const std::vector<TensorIndex>& index, const at::Tensor& edited) {
  if (index.empty()) {
    value = edited;
    return;
  }
  at::Tensor whole = value.clone();
  whole.index_put_(index, edited);
  value = whole;
}

}  // namespace

const at::Tensor& DeviceIndexCache::list(const std::vector<std::int64_t>& values, c10::Device device) {
  auto found = lists_.find(values);
  if (found == lists_.end()) {
    found = lists_.emplace(values, at::tensor(values, at::TensorOptions().dtype(at::kLong).device(device))).first;
  }
  return found->second;
}

const at::Tensor& DeviceIndexCache::arange(std::int64_t size, c10::Device device) {
  auto found = aranges_.find(size);
  if (found == aranges_.end()) {
    found = aranges_.emplace(size, at::arange(size, at::TensorOptions().dtype(at::kLong).device(device))).first;
  }
  return found->second;
}

InterventionHooks::InterventionHooks(const hooks::Plan& plan, const std::vector<HookPointInfo>& points,
                                     const std::vector<at::Tensor>& op_tensors, const RequestSaes* saes,
                                     std::shared_ptr<DeviceIndexCache> indices)
    : indices_(indices ? std::move(indices) : std::make_shared<DeviceIndexCache>()), saes_(saes) {
  for (std::size_t i = 0; i < plan.ops.size(); ++i) {
    const hooks::Op& op = plan.ops[i];
    const HookPointInfo& info = points.at(op.point);
    std::size_t capture = op.kind == OpKind::capture_grad ? watched_.size() : captured_.size();
    captured_.resize(captured_.size() + op.capture_outputs());
    if (op.kind == OpKind::capture_grad) watched_.emplace_back();
    steps_.push_back({&op, info.point, info.layer, info.position_axis, info.head_axis, capture, op_tensors.at(i), i});
    wanted_.emplace(static_cast<int>(info.point), info.layer);
  }
}

bool InterventionHooks::wants(HookPoint point, int layer) const { return wanted_.count({static_cast<int>(point), layer}) > 0; }

void InterventionHooks::apply(HookPoint point, int layer, at::Tensor& value) {
  for (const Step& step : steps_) {
    if (!failure_) return;
    if (step.point == point && step.layer == layer) run(step, value);
  }
}

void InterventionHooks::bind_fns(std::vector<FnBinding> fns, std::function<Status()> stop) {
  fns_ = std::move(fns);
  stop_ = std::move(stop);
}

Result<at::Tensor> InterventionHooks::run_fn(const Step& step, const at::Tensor& region) {
  const hooks::Op& op = *step.op;
  std::string where = fmt::format("params.ops[{}] (fn at {})", op.index, op.hook);
  if (stop_) {
    if (Status s = stop_(); !s) return Status(s.code(), fmt::format("{}: not run: {}", where, s.message()));
  }
  const FnBinding& bound = fns_.at(step.plan_index);
  auto out = bound.fn->call(region, bound.extra, stop_);
  if (!out) {
    std::string name = op.fn_name.empty() ? "sent with the call" : "\"" + op.fn_name + "\"";
    Status failed(out.status().code(), fmt::format("{}: the function {} failed: {}", where, name, out.status().message()));
    // Past a deadline the RPC layer has answered the caller already: the log says which function it was.
    if (failed.code() == ErrorCode::deadline_exceeded || failed.code() == ErrorCode::cancelled) {
      std::fprintf(stderr, "gpubox-modeld: %s\n", failed.message().c_str());
    }
    return failed;
  }
  for (auto& [name, value] : out->captures) fn_captures_.emplace_back(op.hook + ":" + name, value.detach());
  const at::Tensor& got = out->replacement;
  if (got.defined() && (!got.sizes().equals(region.sizes()) || got.scalar_type() != region.scalar_type() ||
                        got.device() != region.device())) {
    return Status::invalid_request(fmt::format("{}: the function returned {} {} on {}; the activation it was given is {} {} on {} "
                                   "(an fn returns the same shape, dtype and device, or None)",
                                   where, hooks::shape_text(got.sizes().vec()), c10::getDtypeNames(got.scalar_type()).first,
                                   got.device().str(), hooks::shape_text(region.sizes().vec()),
                                   c10::getDtypeNames(region.scalar_type()).first, region.device().str()));
  }
  // As an op's own tensor is: one NaN spreads to every later position, and greedy decoding would pick token 0 from it.
  if (got.defined() && !op.allow_nonfinite && !at::isfinite(got).all().item<bool>()) {
    at::Tensor first = at::isfinite(got).logical_not().nonzero()[0].cpu();
    std::vector<std::int64_t> index(first.data_ptr<std::int64_t>(), first.data_ptr<std::int64_t>() + first.numel());
    at::Tensor element = got;
    for (std::int64_t i : index) element = element.select(0, i);
    double value = element.item<double>();
    return Status::invalid_request(fmt::format("{}: the function returned {} at element [{}] (\"allow_nonfinite\": true on the op "
                                               "lets it through)", where, std::isnan(value) ? "NaN" : value > 0 ? "inf" : "-inf",
                                               fmt::join(index, ", ")));
  }
  return got;
}

std::vector<at::Tensor> InterventionHooks::gradients() const {
  std::vector<at::Tensor> out;
  for (const auto& [step, value] : watched_) {
    at::Tensor grad = value.defined() ? value.grad() : at::Tensor();
    if (!grad.defined()) {
      out.emplace_back();
      continue;
    }
    auto index = selection_index(*indices_, grad, step->op->where, step->position_axis, step->head_axis);
    out.push_back((index.empty() ? grad : grad.index(index)).to(at::kFloat, false, /*copy=*/true));
  }
  return out;
}

void InterventionHooks::run(const Step& step, at::Tensor& value) {
  const hooks::Op& op = *step.op;
  if (op.kind == OpKind::capture_grad) {
    // A view of the value that is its own node, so its gradient is kept whatever edits follow.
    value = value.view_as(value);
    value.retain_grad();
    watched_[step.capture] = {&step, value};
    return;
  }
  std::vector<std::int64_t> all_rows;
  if (op.from_row && op.where.rows.empty()) {
    for (std::int64_t row = 0; row < value.size(0); ++row) all_rows.push_back(row);
  }
  auto index = selection_index(*indices_, value, op.where, step.position_axis, step.head_axis, all_rows.empty() ? nullptr : &all_rows);
  at::Tensor region = index.empty() ? value : value.index(index);
  if (op.kind == OpKind::fn) {
    // A copy when the selection is the whole value: in-place edits reach nothing but the copy (only what it returns counts).
    auto replacement = run_fn(step, index.empty() ? value.clone() : region);
    if (!replacement) {
      failure_ = replacement.status();
      return;
    }
    if (replacement->defined()) put(value, index, *replacement);
    return;
  }
  if (op.is_sae()) {
    at::Tensor edited = run_sae(step, region);
    if (!edited.defined()) return;
    put(value, index, edited.to(value.scalar_type()));
    return;
  }
  if (op.kind == OpKind::capture) {
    c10::ScalarType dtype = op.dtype == hooks::CaptureDtype::float32 ? at::kFloat : value.scalar_type();
    captured_[step.capture] = region.to(dtype, false, /*copy=*/true);
    return;
  }
  at::Tensor given = step.tensor.defined() ? step.tensor.to(value.scalar_type()) : at::Tensor();
  at::Tensor replacement;
  switch (op.kind) {
    case OpKind::set:
    case OpKind::mean: replacement = given; break;
    case OpKind::add: replacement = region + given * op.factor; break;
    case OpKind::scale: replacement = region * op.factor; break;
    case OpKind::zero: replacement = at::zeros_like(region); break;
    case OpKind::project_out: replacement = project_out(region, given); break;
    case OpKind::patch: {
      if (given.defined()) {
        replacement = given;
      } else {
        std::vector<std::int64_t> source = {*op.from_row};
        replacement = value.index(selection_index(*indices_, value, op.where, step.position_axis, step.head_axis, &source));
      }
      break;
    }
    default: break;
  }
  if (index.empty()) {
    value = replacement.expand(value.sizes()).contiguous();
  } else {
    at::Tensor edited = value.clone();
    edited.index_put_(index, replacement);
    value = edited;
  }
}

at::Tensor InterventionHooks::run_sae(const Step& step, const at::Tensor& region) {
  const hooks::Op& op = *step.op;
  const Sae& sae = *saes_->saes.at(op.sae);
  if (op.kind == OpKind::sae_steer) {
    at::Tensor direction = sae.decoder_rows(op.features).sum(0) * op.factor;
    return region.to(at::kFloat) + direction;
  }
  SaeCodes codes = sae.encode(region);
  switch (op.kind) {
    case OpKind::sae_capture:
      if (op.top_k == 0) {
        captured_[step.capture] = codes.acts;
      } else {
        auto [values, indices] = codes.acts.topk(op.top_k, -1, true, true);
        captured_[step.capture] = indices;
        captured_[step.capture + 1] = values;
      }
      return {};
    case OpKind::sae_splice: return sae.decode(codes);
    case OpKind::sae_ablate:
    case OpKind::sae_set: {
      at::Tensor edited = codes.acts.clone();
      for (std::size_t i = 0; i < op.features.size(); ++i) {
        edited.select(-1, op.features[i]).fill_(op.kind == OpKind::sae_set ? op.values[i] : 0.0);
      }
      // SAELens' use_error_term: the edited reconstruction plus what the SAE missed of this input.
      at::Tensor error = region.to(at::kFloat) - sae.decode(codes);
      return sae.decode(edited, codes) + error;
    }
    default: return {};
  }
}

Result<GradientTarget> decode_gradient_target(const nlohmann::json& grad_of, std::int64_t vocab, std::int64_t tokens) {
  auto invalid = [](const std::string& message) { return Status(ErrorCode::invalid_request, "params.grad_of" + message); };
  if (!grad_of.is_object() || grad_of.size() != 1) {
    return invalid(": expected one of {\"logit\": {...}}, {\"logit_diff\": {...}}, {\"loss\": {}}");
  }
  // References into grad_of itself (items()' proxy is a temporary: binding to it would dangle).
  const std::string& kind = grad_of.begin().key();
  const nlohmann::json& spec = grad_of.begin().value();
  GradientTarget target;
  if (!spec.is_object()) return invalid("." + kind + ": expected an object");
  auto token = [&](const nlohmann::json& value, const std::string& field) -> Result<std::int64_t> {
    if (!value.is_number_integer() || value.get<std::int64_t>() < 0 || value.get<std::int64_t>() >= vocab) {
      return invalid(fmt::format(".{}.{}: {} is not a token id of this model (0 to {})", kind, field, value.dump(), vocab - 1));
    }
    return value.get<std::int64_t>();
  };
  if (kind == "loss") {
    target.kind = GradientTarget::Kind::loss;
    if (!spec.empty()) return invalid(".loss: takes no fields");
    if (tokens < 2) return invalid(".loss: needs prompts of 2 tokens or more");
    return target;
  }
  if (kind == "logit") {
    target.kind = GradientTarget::Kind::logit;
    auto a = token(spec.value("token", nlohmann::json()), "token");
    if (!a) return a.status();
    target.token = *a;
  } else if (kind == "logit_diff") {
    target.kind = GradientTarget::Kind::logit_diff;
    const auto& pair = spec.value("tokens", nlohmann::json());
    if (!pair.is_array() || pair.size() != 2) return invalid(".logit_diff.tokens: expected [a, b], two token ids");
    auto a = token(pair[0], "tokens"), b = token(pair[1], "tokens");
    if (!a) return a.status();
    if (!b) return b.status();
    target.token = *a, target.other = *b;
  } else {
    return invalid(": unknown target \"" + kind + "\" (logit, logit_diff, loss)");
  }
  for (const auto& [key, value] : spec.items()) {
    if (key != "token" && key != "tokens" && key != "position") return invalid("." + kind + ": unknown field \"" + key + "\"");
  }
  auto position = spec.value("position", nlohmann::json(-1));
  if (!position.is_number_integer() || position.get<std::int64_t>() < -tokens || position.get<std::int64_t>() >= tokens) {
    return invalid(fmt::format(".{}.position: {} is out of range for {} positions", kind, position.dump(), tokens));
  }
  target.position = (position.get<std::int64_t>() + tokens) % tokens;
  return target;
}

at::Tensor gradient_scalar(const GradientTarget& target, const at::Tensor& logits, const ForwardInput& input) {
  at::Tensor values = logits.to(at::kFloat);
  if (target.kind == GradientTarget::Kind::loss) {
    // Position t predicts token t+1, where both are the prompt's own (left padding is masked out).
    at::Tensor predicted = values.narrow(1, 0, values.size(1) - 1);
    at::Tensor next = input.ids.narrow(1, 1, input.ids.size(1) - 1);
    at::Tensor real = input.key_mask.narrow(1, 0, values.size(1) - 1).logical_and(input.key_mask.narrow(1, 1, values.size(1) - 1));
    at::Tensor losses = at::cross_entropy_loss(predicted.reshape({-1, values.size(2)}), next.reshape({-1}), {}, at::Reduction::None);
    at::Tensor weight = real.reshape({-1}).to(at::kFloat);
    return (losses * weight).sum() / weight.sum();
  }
  at::Tensor at_position = values.select(1, target.position);
  at::Tensor picked = at_position.select(1, target.token);
  if (target.kind == GradientTarget::Kind::logit_diff) picked = picked - at_position.select(1, target.other);
  return picked.sum();
}

Result<std::unique_ptr<GenerationInterventions>> GenerationInterventions::make(
    const nlohmann::json& ops, const Architecture& architecture, std::int64_t rows, std::int64_t prompt_tokens,
    std::int64_t passes, const std::vector<zmq::message_t>& attachments, c10::Device device, CaptureSink sink,
    const RequestSaes* saes, FnScope fns, std::function<Status()> stop) {
  std::unique_ptr<GenerationInterventions> made(new GenerationInterventions());
  made->saes_ = saes;
  made->stop_ = std::move(stop);
  if (!ops.is_array()) return Status(ErrorCode::invalid_request, "params.ops: expected a list of operations");
  made->ops_ = ops;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    nlohmann::json& op = made->ops_[i];
    std::optional<std::vector<std::int64_t>> steps;
    if (op.is_object() && op.contains("steps")) {
      const nlohmann::json& given = op["steps"];
      std::string where = fmt::format("params.ops[{}].steps", i);
      if (!given.is_array() || given.empty()) {
        return Status(ErrorCode::invalid_request, where + ": expected a non-empty list of passes (0: the prompt's)");
      }
      steps.emplace();
      for (const auto& pass : given) {
        if (!pass.is_number_integer() || pass.get<std::int64_t>() < 0 || pass.get<std::int64_t>() >= passes) {
          return Status(ErrorCode::invalid_request, fmt::format("{}: {} is not a pass of this generation (0 to {})", where,
                                                                pass.dump(), passes - 1));
        }
        steps->push_back(pass.get<std::int64_t>());
      }
      op.erase("steps");
    }
    made->steps_.push_back(std::move(steps));
  }
  made->points_ = hook_points(architecture);
  made->rows_ = rows;
  for (const auto& frame : attachments) made->attachment_bytes_.push_back(frame.size());
  made->sink_ = std::move(sink);
  made->op_tensors_.resize(ops.size());
  made->fns_.resize(ops.size());
  FnBinder binder(std::move(fns), attachments, device);
  // The prompt pass, then the first and the last later pass.
  std::vector<std::pair<std::int64_t, std::int64_t>> checks = {{0, prompt_tokens}};
  if (passes > 1) checks.emplace_back(1, prompt_tokens + 1);
  if (passes > 2) checks.emplace_back(passes - 1, prompt_tokens + passes - 1);
  for (const auto& [pass, keys] : checks) {
    std::vector<bool> active;  // at the prompt's pass; later, at any later pass
    for (const auto& steps : made->steps_) {
      bool later = !steps || std::any_of(steps->begin(), steps->end(), [](std::int64_t p) { return p > 0; });
      active.push_back(pass == 0 ? made->active(steps, 0) : later);
    }
    auto plan = made->plan_for(active, pass == 0 ? prompt_tokens : 1, keys);
    if (!plan) {
      if (pass == 0) return plan.status();
      return Status(ErrorCode::invalid_request,
                    plan.status().message() + " (at the passes after the prompt's, which add one position each; "
                                              "\"steps\": [0] keeps an op to the prompt's pass)");
    }
    if (Status s = hooks::check_finite(*plan, byte_views(attachments)); !s) return s;
    for (const auto& op : plan->ops) {
      if (op.kind == OpKind::capture_grad) {
        return Status(ErrorCode::invalid_request,
                      fmt::format("params.ops[{}].op: capture_grad is for model.run, not model.generate", op.index));
      }
      if (op.tensor && !made->op_tensors_[op.index].defined()) {
        made->op_tensors_[op.index] = tensor_from_wire(*op.tensor, attachments[op.tensor->attachment], device);
      }
      if (op.kind == OpKind::fn && !made->fns_[op.index].fn) {
        auto bound = binder.bind(op);
        if (!bound) return bound.status();
        made->fns_[op.index] = std::move(*bound);
      }
    }
  }
  return made;
}

bool GenerationInterventions::active(const std::optional<std::vector<std::int64_t>>& steps, std::int64_t pass) {
  return !steps || std::find(steps->begin(), steps->end(), pass) != steps->end();
}

Result<hooks::Plan> GenerationInterventions::plan_for(const std::vector<bool>& active, std::int64_t tokens,
                                                      std::int64_t keys) const {
  static const std::vector<hooks::SaeShape> none;
  auto shapes = request_shapes(points_, rows_, tokens, keys);
  keep_last_position_after_blocks(shapes);  // every pass of a generation computes the last position's logits only
  return hooks::decode_plan(ops_, shapes, attachment_bytes_, active, saes_ ? saes_->shapes : none);
}

Result<Hooks*> GenerationInterventions::begin(std::int64_t pass, std::int64_t tokens, std::int64_t keys) {
  hooks_.reset();
  std::vector<bool> now;
  for (const auto& steps : steps_) now.push_back(active(steps, pass));
  auto plan = plan_for(now, tokens, keys);
  if (!plan) return plan.status();
  plan_ = std::move(*plan);
  if (plan_.empty()) return static_cast<Hooks*>(nullptr);
  std::vector<at::Tensor> tensors;
  std::vector<FnBinding> fns;
  for (const auto& op : plan_.ops) {
    tensors.push_back(op_tensors_[op.index]);
    fns.push_back(fns_[op.index]);
  }
  hooks_.emplace(plan_, points_, tensors, saes_, indices_);
  hooks_->bind_fns(std::move(fns), stop_);
  return static_cast<Hooks*>(&*hooks_);
}

Status GenerationInterventions::end(std::int64_t pass) {
  if (!hooks_) return {};
  if (!hooks_->failure()) return hooks_->failure();
  static const std::vector<hooks::SaeShape> none;
  std::size_t capture = 0;
  for (const auto& op : plan_.ops) {
    for (std::size_t output = 0; output < op.capture_outputs(); ++output) {
      const at::Tensor& value = hooks_->captured()[capture++];
      if (!value.defined()) continue;
      if (Status s = sink_(pass, hooks::capture_name(op, saes_ ? saes_->shapes : none, output), value); !s) return s;
    }
  }
  for (const auto& [name, value] : hooks_->fn_captures()) {
    if (Status s = sink_(pass, name, value); !s) return s;
  }
  return {};
}

}  // namespace gpubox::modeld
