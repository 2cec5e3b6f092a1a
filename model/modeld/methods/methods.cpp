#include "model/modeld/methods/methods.h"

#include "model/modeld/interventions/fn_runner.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <chrono>
#include <map>
#include <optional>
#include <thread>
#include <unistd.h>

#include "base/thread_annotations.h"
#include "hooks/spec.h"
#include "model/modeld/methods/chat_request.h"
#include "model/modeld/methods/generate_method.h"
#include "model/modeld/methods/prompt_request.h"
#include "model/modeld/interventions/intervention_hooks.h"
#include "model/modeld/scheduler/method_guard.h"
#include "model/modeld/scheduler/generation.h"
#include "model/modeld/gpu/gpu_info.h"
#include "model/modeld/gpu/gpu_probe.h"
#include "model/modeld/decoder/tensor_wire.h"
#include "rpc/params.h"

namespace gpubox::modeld {
namespace {

using nlohmann::json;

// How long model.unload waits for the model's running calls to end before it answers "released": false.
constexpr std::chrono::seconds kUnloadWait{2};

// One per rank: where each part of the model runs.
json device_names(const Decoder& decoder) {
  json names = json::array();
  for (const auto& device : decoder.devices()) names.push_back(device.str());
  return names;
}

json model_info(const LoadedModel& model) {
  const Architecture& a = model.architecture;
  json info = {{"name", model.spec.name},
               {"architecture", a.name},
               {"parameters", model.decoder->parameter_count()},
               {"dtype", dtype_wire_name(model.decoder->dtype())},
               {"device", model.decoder->device().str()},
               {"memory_bytes", model.decoder->weight_bytes()},
               {"layers", a.num_layers},
               {"hidden_size", a.hidden_size},
               {"heads", a.num_heads},
               {"kv_heads", a.num_kv_heads},
               {"head_dim", a.head_dim},
               {"vocab_size", a.vocab_size},
               {"context_length", a.max_positions},
               {"eos_token_ids", a.eos_ids},
               {"tokenizer", model.tokenizer != nullptr},
               {"chat_template", model.chat && model.chat->has_template()},
               {"load_seconds", model.load_seconds},
               {"unexpected_tensors", model.decoder->unexpected_tensors()},
               {"hook_points", hook_points(a).size()},
               {"kv_cache", model.scheduler->kv_cache()},
               {"saes", model.saes->list(model.spec.hidden)}};
  info["devices"] = device_names(*model.decoder);
  info["tensor_parallel"] = model.decoder->devices().size();
  info["rank_memory_bytes"] = model.decoder->rank_weight_bytes();
  if (model.chat && model.chat->has_template()) info["chat_templates"] = model.chat->names();
  if (!model.chat_error.empty()) info["chat_template_error"] = model.chat_error;
  if (!model.spec.hidden) info["path"] = model.spec.path;
  return info;
}

// Sends one tensor as a DATA message named name (a RESULT carries no attachments).
Status send_tensor(rpc::CallContext& ctx, const at::Tensor& tensor, const std::string& name) {
  std::vector<zmq::message_t> attachments;
  json item = tensor_to_wire(tensor, attachments);
  item["name"] = name;
  return ctx.send_data(item, std::move(attachments));
}

// model.forward takes no ops nor grad_of: model.run is the pass that does.
Status forward_takes_no_ops(rpc::CallContext& ctx, bool with_ops) {
  for (const char* key : {"ops", "grad_of"}) {
    if (!with_ops && ctx.params().is_object() && ctx.params().contains(key)) {
      return Status(ErrorCode::invalid_request, std::string("params.") + key +
                                                    ": model.forward is the pass without ops; model.run is the forward pass that takes them");
    }
  }
  return Status::ok();
}

// model.run's ops decoded against the request's shapes (an empty plan without ops).
Result<hooks::Plan> decode_run_plan(rpc::CallContext& ctx, const json* ops, const std::vector<HookPointInfo>& points,
                                    std::size_t rows, std::int64_t tokens, bool last_only, const RequestSaes& saes) {
  if (!ops) return hooks::Plan();
  std::vector<std::size_t> attachment_bytes;
  for (const auto& frame : ctx.attachments()) attachment_bytes.push_back(frame.size());
  auto shapes = request_shapes(points, static_cast<std::int64_t>(rows), tokens, tokens);
  if (last_only) keep_last_position_after_blocks(shapes);
  auto decoded = hooks::decode_plan(*ops, shapes, attachment_bytes, {}, saes.shapes);
  if (!decoded) return decoded.status();
  if (Status s = hooks::check_finite(*decoded, byte_views(ctx.attachments())); !s) return s;
  return std::move(*decoded);
}

// The scalar model.run's capture_grad ops differentiate (params.grad_of), checked against the plan.
Result<std::optional<GradientTarget>> read_gradient_target(const json* grad_of, bool last_only, const hooks::Plan& plan,
                                                           const LoadedModel& m, std::int64_t tokens) {
  if (grad_of && last_only) {
    return Status(ErrorCode::invalid_request, "params.last_only: not with grad_of (its positions index every position's logits)");
  }
  if (grad_of) {
    if (plan.grad_count() == 0) return Status(ErrorCode::invalid_request, "params.grad_of: no capture_grad op asks for a gradient");
    auto decoded = decode_gradient_target(*grad_of, m.architecture.vocab_size, tokens);
    if (!decoded) return decoded.status();
    return std::optional<GradientTarget>(*decoded);
  }
  if (plan.grad_count() > 0) {
    return Status(ErrorCode::invalid_request, "params.grad_of: capture_grad needs the scalar to differentiate "
                                              "({\"logit_diff\": {\"tokens\": [a, b]}}, {\"logit\": ...} or {\"loss\": {}})");
  }
  return std::optional<GradientTarget>();
}

// A forward or run request, checked, ready for its pass.
struct ForwardRequest {
  ForwardRequest(const LoadedModel& model, const std::vector<std::vector<std::int64_t>>& prompts_)
      : m(model), prompts(prompts_) {}

  const LoadedModel& m;
  const std::vector<std::vector<std::int64_t>>& prompts;
  bool last_only = false;
  std::string logits_dtype;
  std::vector<HookPointInfo> points;
  hooks::Plan plan;
  RequestSaes saes;
  std::vector<FnBinding> fns;
  std::optional<GradientTarget> target;
};

// Sends the pass's captures, fn captures and gradients as DATA, appending their names.
Status send_pass_outputs(rpc::CallContext& ctx, const ForwardRequest& r, const InterventionHooks* interventions,
                         const std::vector<at::Tensor>& gradients, json& names) {
  std::size_t capture = 0;
  for (const auto& op : r.plan.ops) {
    for (std::size_t output = 0; output < op.capture_outputs(); ++output) {
      const at::Tensor& captured = interventions->captured()[capture++];
      if (!captured.defined()) continue;
      std::string name = hooks::capture_name(op, r.saes.shapes, output);
      if (Status sent = send_tensor(ctx, captured.detach(), name); !sent) return sent;
      names.push_back(name);
    }
  }
  for (const auto& [name, value] : interventions ? interventions->fn_captures() : FnCaptures()) {
    if (Status sent = send_tensor(ctx, value, name); !sent) return sent;
    names.push_back(name);
  }
  std::size_t gradient = 0;
  for (const auto& op : r.plan.ops) {
    if (op.kind != hooks::OpKind::capture_grad) continue;
    const at::Tensor& grad = gradients[gradient++];
    if (!grad.defined()) continue;
    if (Status sent = send_tensor(ctx, grad, "grad:" + op.hook); !sent) return sent;
    names.push_back("grad:" + op.hook);
  }
  return Status::ok();
}

// The pass itself, on the model's scheduler: logits, then every output, as DATA; the RESULT names them.
Result<json> run_forward_pass(rpc::CallContext& ctx, ForwardRequest& r) {
  const LoadedModel& m = r.m;
  ForwardInput input = left_padded_batch(r.prompts, m.decoder->device());
  std::optional<InterventionHooks> interventions;
  if (!r.plan.empty()) {
    std::vector<at::Tensor> op_tensors;
    for (const auto& op : r.plan.ops) {
      op_tensors.push_back(op.tensor ? tensor_from_wire(*op.tensor, ctx.attachments()[op.tensor->attachment],
                                                        m.decoder->device())
                                     : at::Tensor());
    }
    interventions.emplace(r.plan, r.points, op_tensors, &r.saes);
    interventions->bind_fns(std::move(r.fns), [&ctx] { return ctx.stop_reason(); });
  }
  at::Tensor logits = m.decoder->forward(input, nullptr, r.last_only, interventions ? &*interventions : nullptr, r.target.has_value());
  if (interventions && !interventions->failure()) return interventions->failure();
  std::vector<at::Tensor> gradients;
  double scalar = 0;
  if (r.target) {
    at::Tensor value = gradient_scalar(*r.target, logits, input);
    value.backward();
    scalar = value.item<double>();
    gradients = interventions->gradients();
    logits = logits.detach();
  }
  if (r.logits_dtype == "float32") logits = logits.to(at::kFloat);
  json names = {"logits"};
  if (Status sent = send_tensor(ctx, logits, "logits"); !sent) return sent;
  if (Status sent = send_pass_outputs(ctx, r, interventions ? &*interventions : nullptr, gradients, names); !sent) return sent;
  json lengths = json::array();
  for (const auto& p : r.prompts) lengths.push_back(p.size());
  json result = {{"tensors", names}, {"lengths", lengths}, {"padding", "left"}};
  if (r.target) result["grad_of_value"] = scalar;
  return result;
}

// model.forward, and model.run (with_ops): a forward pass with the spec's
// operations; with none it is the plain forward, without a Hooks object.
Result<json> forward_method(ModelRegistry& registry, rpc::CallContext& ctx, bool with_ops) {
  if (Status s = forward_takes_no_ops(ctx, with_ops); !s) return s;
  rpc::ParamReader params(ctx.params());
  auto request = read_prompt_request(registry, params);
  if (!request) return request.status();
  const LoadedModel& m = *request->model;
  ForwardRequest r(m, request->prompts);
  r.last_only = params.boolean("last_only").value_or(false);
  r.logits_dtype = params.string("logits_dtype").value_or("float32");
  const json* ops = with_ops ? params.raw("ops") : nullptr;
  const json* grad_of = with_ops ? params.raw("grad_of") : nullptr;
  std::string session = with_ops ? params.string("session").value_or("") : "";  // whose function names the fn ops name
  if (Status s = params.finish(); !s) return s;
  if (Status s = check_session(session); !s) return s;
  if (r.logits_dtype != "float32" && r.logits_dtype != "model") {
    return Status(ErrorCode::invalid_request, "params.logits_dtype: expected \"float32\" or \"model\"");
  }
  if (Status s = check_prompts(m.architecture, r.prompts); !s) return s;
  std::int64_t tokens = longest_prompt(r.prompts);
  r.saes = m.saes->snapshot();
  if (ops) r.points = hook_points(m.architecture);
  auto plan = decode_run_plan(ctx, ops, r.points, r.prompts.size(), tokens, r.last_only, r.saes);
  if (!plan) return plan.status();
  r.plan = std::move(*plan);
  if (!r.plan.empty()) {  // loaded here, on the caller's thread: the scheduler's runs only the pass
    auto bound = FnBinder(FnScope{m.fns.get(), session}, ctx.attachments(), m.decoder->device()).bind(r.plan);
    if (!bound) return bound.status();
    r.fns = std::move(*bound);
  }
  auto target = read_gradient_target(grad_of, r.last_only, r.plan, m, tokens);
  if (!target) return target.status();
  r.target = *target;
  // The pass runs on the model's scheduler, alone between two decode steps of its batch.
  auto pass = [&]() -> Result<json> { return run_forward_pass(ctx, r); };
  return m.scheduler->run_alone([&] { return guarded(with_ops ? "model.run" : "model.forward", pass); },
                                {[&ctx] { return ctx.stopped(); }, nullptr});
}

// modeld.status and the models' descriptions: model.list, model.info, model.stats.
void add_status_methods(rpc::MethodRegistry& methods, ModelRegistry& registry, StartupProbe& probe) {
  methods.add("modeld.status", [&registry, &probe](rpc::CallContext&) -> Result<json> {
    json status = registry.status();
    status["pid"] = ::getpid();
    MutexLock lock(probe.mutex);
    if (!probe.result.is_null()) status["gpu_probe"] = probe.result;
    return status;
  });
  methods.add("model.list", [&registry](rpc::CallContext&) -> Result<json> {
    json models = registry.status()["models"];
    for (auto& entry : models) {
      if (auto ready = registry.ready(entry["name"]); ready) {
        entry["architecture"] = (*ready)->architecture.name;
        entry["device"] = (*ready)->decoder->device().str();
        entry["devices"] = device_names(*(*ready)->decoder);
        entry["tensor_parallel"] = (*ready)->decoder->devices().size();
        entry["dtype"] = dtype_wire_name((*ready)->decoder->dtype());
        entry["hook_points"] = hook_points((*ready)->architecture).size();
      }
    }
    return json{{"models", models}};
  });
  methods.add("model.info", [&registry](rpc::CallContext& ctx) -> Result<json> {
    rpc::ParamReader params(ctx.params());
    auto model = find_model(registry, params);
    if (Status s = params.finish(); !s) return s;
    if (!model) return model.status();
    return model_info(**model);
  });
  methods.add("model.stats", [&registry](rpc::CallContext& ctx) -> Result<json> {
    rpc::ParamReader params(ctx.params());
    auto model = find_model(registry, params);
    if (Status s = params.finish(); !s) return s;
    if (!model) return model.status();
    const Decoder& decoder = *(*model)->decoder;
    return json{{"attention", {{"prefill", decoder.attention_backend(PassKind::prefill)},
                               {"decode", decoder.attention_backend(PassKind::decode)},
                               {"fixed_decode", decoder.attention_backend(PassKind::fixed_decode)}}},
                {"batching", (*model)->scheduler->stats()},
                {"functions_abandoned_running", FnRunner::abandoned_running()},
                {"kv_budget", registry.kv_budget()}};
  });
}

// Text and token ids: model.chat_template, model.tokenize, model.detokenize.
void add_text_methods(rpc::MethodRegistry& methods, ModelRegistry& registry) {
  methods.add("model.chat_template", [&registry](rpc::CallContext& ctx) -> Result<json> {
    rpc::ParamReader params(ctx.params());
    auto model = find_model(registry, params);
    auto chat = read_chat_request(params, false);
    if (!chat) return chat.status();
    if (Status s = params.finish(); !s) return s;
    if (!model) return model.status();
    if (!chat->has_value()) return Status(ErrorCode::invalid_request, "params.messages: required");
    auto texts = render_chat((*model)->chat.get(), **chat, (*model)->spec.name);
    if (!texts) return texts.status();
    json text = json::array(), ids = json::array();
    for (const auto& t : *texts) {
      text.push_back(t);
      if ((*model)->tokenizer) ids.push_back(encode(**model, t, false));
    }
    json result = {{"text", (*chat)->batched ? text : text[0]}};
    if ((*model)->tokenizer) result["ids"] = (*chat)->batched ? ids : ids[0];
    return result;
  });
  methods.add("model.tokenize", [&registry](rpc::CallContext& ctx) -> Result<json> {
    rpc::ParamReader params(ctx.params());
    auto model = find_model(registry, params);
    auto text = params.string("text", true);
    auto special = params.boolean("add_special_tokens");
    if (Status s = params.finish(); !s) return s;
    if (!model) return model.status();
    if (Status s = need_tokenizer(**model); !s) return s;
    auto encoding = (*model)->tokenizer->encode(*text, special.value_or(true));
    json offsets = json::array();
    for (auto [begin, end] : encoding.offsets) offsets.push_back({begin, end});
    return json{{"ids", encoding.ids}, {"offsets", offsets}};
  });
  methods.add("model.detokenize", [&registry](rpc::CallContext& ctx) -> Result<json> {
    rpc::ParamReader params(ctx.params());
    auto model = find_model(registry, params);
    const json* ids = params.raw("ids");
    auto skip = params.boolean("skip_special_tokens");
    if (Status s = params.finish(); !s) return s;
    if (!model) return model.status();
    if (Status s = need_tokenizer(**model); !s) return s;
    if (!ids || !ids->is_array()) return Status(ErrorCode::invalid_request, "params.ids: expected a list of token ids");
    std::vector<std::int64_t> list;
    for (const auto& id : *ids) {
      if (!id.is_number_integer() || id.get<std::int64_t>() < 0 || id.get<std::int64_t>() >= (*model)->architecture.vocab_size) {
        return Status(ErrorCode::invalid_request, fmt::format("params.ids: {} is not a token id of this model", id.dump()));
      }
      list.push_back(id.get<std::int64_t>());
    }
    return json{{"text", decode(**model, list, skip.value_or(false))}};
  });
}

// Forward passes: model.forward, model.run, model.hooks (the points run names), model.generate.
void add_pass_methods(rpc::MethodRegistry& methods, ModelRegistry& registry) {
  methods.add("model.forward", [&registry](rpc::CallContext& ctx) { return guarded("model.forward", [&] { return forward_method(registry, ctx, false); }); });
  methods.add("model.run", [&registry](rpc::CallContext& ctx) { return guarded("model.run", [&] { return forward_method(registry, ctx, true); }); });
  methods.add("model.hooks", [&registry](rpc::CallContext& ctx) -> Result<json> {
    rpc::ParamReader params(ctx.params());
    auto model = find_model(registry, params);
    if (Status s = params.finish(); !s) return s;
    if (!model) return model.status();
    json list = json::array();
    for (const auto& p : hook_points((*model)->architecture)) {
      json entry = {{"name", p.name}, {"shape", p.shape}};
      if (p.opt_in) entry["opt_in"] = true;
      list.push_back(std::move(entry));
    }
    return json{{"hooks", list}};
  });
  methods.add("model.generate", [&registry](rpc::CallContext& ctx) { return guarded("model.generate", [&] { return generate_method(registry, ctx); }); });
}

// model.load and model.unload.
void add_load_methods(rpc::MethodRegistry& methods, ModelRegistry& registry) {
  methods.add("model.load", [&registry](rpc::CallContext& ctx) -> Result<json> {
    auto spec = parse_model_load_spec(ctx.params(), "params");
    if (!spec) return spec.status();
    if (Status s = registry.add(*spec); !s) return s;
    return json{{"name", spec->name}, {"state", "loading"}};
  });
  methods.add("model.unload", [&registry](rpc::CallContext& ctx) -> Result<json> {
    rpc::ParamReader params(ctx.params());
    auto name = params.string("model", true);
    if (Status s = params.finish(); !s) return s;
    auto removed = registry.remove(*name);
    if (!removed) return removed.status();
    // A call still running (a long generate, a function that does not return:
    // nothing stops one inside) keeps the model's memory until it ends. Wait a
    // little for it, then say so rather than claim the memory is free.
    auto give_up = std::chrono::steady_clock::now() + kUnloadWait;
    while (!removed->expired() && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (removed->expired()) return json{{"unloaded", *name}, {"released", true}};
    return json{{"unloaded", *name},
                {"released", false},
                {"message", fmt::format("model \"{}\" is unloaded, but a call of it is still running: its memory is released "
                                        "when that call ends (a function that never returns holds it until modeld restarts)",
                                        *name)}};
  });
}
}  // namespace

void add_modeld_methods(rpc::MethodRegistry& methods, ModelRegistry& registry, StartupProbe& probe) {
  add_status_methods(methods, registry, probe);
  add_text_methods(methods, registry);
  add_pass_methods(methods, registry);
  add_load_methods(methods, registry);
  add_sae_methods(methods, registry);
  add_fn_methods(methods, registry);
  add_weight_methods(methods, registry);
  methods.add("gpu.info", [](rpc::CallContext&) -> Result<json> { return gpu_info(); });
  methods.add("gpu.probe", [](rpc::CallContext&) { return guarded("gpu.probe", [] { return gpu_probe(); }); });
}

}  // namespace gpubox::modeld
