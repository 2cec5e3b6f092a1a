#include "model/modeld/methods/generate_method.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "model/modeld/decoder/tensor_wire.h"
#include "model/modeld/interventions/intervention_hooks.h"
#include "model/modeld/methods/prompt_request.h"
#include "model/modeld/scheduler/generation.h"
#include "rpc/params.h"

namespace gpubox::modeld {
namespace {

using nlohmann::json;

// The text a row adds at this step, holding back an incomplete UTF-8 character.
class TextStreamer {
 public:
  explicit TextStreamer(const LoadedModel& model) : model_(model) {}
  std::string delta(const std::vector<std::int64_t>& tokens) {
    std::string text = decode(model_, tokens, true);
    if (text.size() >= 3 && text.compare(text.size() - 3, 3, "\xEF\xBF\xBD") == 0) return "";
    if (text.size() < emitted_) return "";
    std::string out = text.substr(emitted_);
    emitted_ = text.size();
    return out;
  }

 private:
  const LoadedModel& model_;
  std::size_t emitted_ = 0;
};

// What a generate request asks besides its model and prompts.
struct GenerateParams {
  SamplingOptions options;
  bool stream = false;
  const json* ops = nullptr;
  std::string session;  // whose function names the fn ops name (fn_set.h)
  std::vector<std::string> stop_strings;
};

// Reads the rest of generate's params and finishes them (unknown keys refused).
Result<GenerateParams> read_generate_params(rpc::ParamReader& params, const LoadedModel& m) {
  GenerateParams p;
  SamplingOptions& options = p.options;
  options.max_new_tokens = params.integer("max_new_tokens", 0, 1 << 20).value_or(32);
  options.temperature = params.number("temperature", 0, 100).value_or(0);
  options.top_k = params.integer("top_k", 0, 1 << 30).value_or(0);
  options.top_p = params.number("top_p", 0, 1).value_or(1.0);
  if (auto seed = params.integer("seed", 0, INT64_MAX)) options.seed = static_cast<std::uint64_t>(*seed);
  options.stop_at_eos = !params.boolean("ignore_eos").value_or(false);
  options.steps = m.spec.cuda_graphs ? DecodeSteps::graph : DecodeSteps::dynamic;
  if (auto steps = params.string("decode_steps")) {
    static const std::map<std::string, DecodeSteps> kinds = {
        {"dynamic", DecodeSteps::dynamic}, {"fixed", DecodeSteps::fixed}, {"graph", DecodeSteps::graph}};
    auto kind = kinds.find(*steps);
    if (kind == kinds.end()) {
      return Status(ErrorCode::invalid_request,
                    fmt::format("params.decode_steps: \"{}\" is not one of dynamic, fixed, graph", *steps));
    }
    options.steps = kind->second;
  }
  p.stream = params.boolean("stream").value_or(false);
  p.ops = params.raw("ops");
  p.session = params.string("session").value_or("");
  p.stop_strings = params.string_list("stop").value_or(std::vector<std::string>{});
  if (const json* stop_ids = params.raw("stop_ids")) {
    if (!stop_ids->is_array()) return Status(ErrorCode::invalid_request, "params.stop_ids: expected a list of token ids");
    for (const auto& id : *stop_ids) {
      if (!id.is_number_integer()) return Status(ErrorCode::invalid_request, "params.stop_ids: token ids must be integers");
      options.stop_ids.push_back(id.get<std::int64_t>());
    }
  }
  if (Status s = params.finish(); !s) return s;
  if (Status s = check_session(p.session); !s) return s;
  if (!p.stop_strings.empty()) {
    if (Status s = need_tokenizer(m); !s) return s;
  }
  return p;
}

// generate's ops as the passes' interventions, their captures sent as DATA; null without ops.
Result<std::unique_ptr<GenerationInterventions>> generation_interventions(rpc::CallContext& ctx, const LoadedModel& m,
                                                                          const GenerateParams& p,
                                                                          const std::vector<std::vector<std::int64_t>>& prompts,
                                                                          const RequestSaes& saes) {
  if (!p.ops) return std::unique_ptr<GenerationInterventions>();
  std::int64_t length = longest_prompt(prompts);
  auto sink = [&ctx](std::int64_t pass, const std::string& hook, const at::Tensor& value) {
    std::vector<zmq::message_t> attachments;
    json item = tensor_to_wire(value, attachments);
    item["name"] = hook;
    item["step"] = pass;
    return ctx.send_data(item, std::move(attachments));
  };
  return GenerationInterventions::make(*p.ops, m.architecture, static_cast<std::int64_t>(prompts.size()), length,
                                       std::max<std::int64_t>(1, new_token_limit(m.architecture, p.options, length)),
                                       ctx.attachments(), m.decoder->device(), sink, &saes, FnScope{m.fns.get(), p.session},
                                       [&ctx] { return ctx.stop_reason(); });
}

// What generate does after each step: keeps each row's tokens, finishes a row at
// its first stop string, and streams the step when asked. The scheduler's thread.
class GenerateSteps {
 public:
  GenerateSteps(rpc::CallContext& ctx, const LoadedModel& m, const GenerateParams& p, std::size_t rows)
      : ctx_(ctx), m_(m), p_(p), rows_(rows), so_far_(rows), streamers_(rows, TextStreamer(m)),
        stop_cut_(rows, std::string::npos) {}

  bool on_step(const std::vector<std::int64_t>& tokens, std::vector<bool>& finished) {
    if (ctx_.stopped()) return false;
    json texts = json::array();
    for (std::size_t r = 0; r < rows_; ++r) {
      if (tokens[r] >= 0) so_far_[r].push_back(tokens[r]);
      if (!m_.tokenizer) continue;
      if (!p_.stop_strings.empty() && tokens[r] >= 0 && stop_cut_[r] == std::string::npos) cut_at_stop(r, finished);
      texts.push_back(p_.stream && tokens[r] >= 0 ? streamers_[r].delta(so_far_[r]) : "");
    }
    if (p_.stream) {
      json item = {{"step", step_}, {"tokens", tokens}};
      if (m_.tokenizer) item["text"] = texts;
      stream_error_ = ctx_.send_data(item);
      if (!stream_error_) return false;
    }
    ++step_;
    return !ctx_.stopped();
  }

  // Where each row's text ends (npos: no stop string in it).
  const std::vector<std::size_t>& stop_cut() const { return stop_cut_; }
  const Status& stream_error() const { return stream_error_; }

 private:
  void cut_at_stop(std::size_t r, std::vector<bool>& finished) {
    std::string text = decode(m_, so_far_[r], true);
    for (const auto& stop : p_.stop_strings) {
      if (std::size_t at = text.find(stop); at != std::string::npos) {
        stop_cut_[r] = std::min(stop_cut_[r], at);
        finished[r] = true;
      }
    }
  }

  rpc::CallContext& ctx_;
  const LoadedModel& m_;
  const GenerateParams& p_;
  std::size_t rows_;
  std::vector<std::vector<std::int64_t>> so_far_;
  std::vector<TextStreamer> streamers_;
  std::vector<std::size_t> stop_cut_;
  std::int64_t step_ = 0;
  Status stream_error_;
};

// generate's RESULT: tokens, finish reasons, prompt lengths and text (lists when batched).
json generate_result(const LoadedModel& m, const PromptRequest& request, const SamplingOptions& options,
                     const Generated& generated, const std::vector<std::size_t>& stop_cut) {
  const auto& prompts = request.prompts;
  bool batched = request.batched;
  json tokens = json::array(), texts = json::array();
  for (std::size_t r = 0; r < prompts.size(); ++r) {
    tokens.push_back(generated.tokens[r]);
    if (m.tokenizer) {
      std::string text = decode(m, generated.tokens[r], true);
      if (stop_cut[r] != std::string::npos) text.resize(stop_cut[r]);
      texts.push_back(text);
    }
  }
  json result = {{"tokens", batched ? tokens : tokens[0]}, {"finish_reason", batched ? json(generated.finish_reasons) : json(generated.finish_reasons[0])},
                 {"prompt_tokens", json::array()}};
  for (const auto& p : prompts) result["prompt_tokens"].push_back(p.size());
  if (!batched) result["prompt_tokens"] = result["prompt_tokens"][0];
  if (m.tokenizer) result["text"] = batched ? texts : texts[0];
  if (std::int64_t allowed = new_token_limit(m.architecture, options, longest_prompt(prompts)); allowed < options.max_new_tokens) {
    // The context, not max_new_tokens, ended the generation: say so rather than let "length" hide it.
    result["max_new_tokens_cut"] = {{"asked", options.max_new_tokens}, {"allowed", std::max<std::int64_t>(allowed, 0)},
                                    {"context_length", m.architecture.max_positions}};
  }
  return result;
}

}  // namespace

Result<json> generate_method(ModelRegistry& registry, rpc::CallContext& ctx) {
  rpc::ParamReader params(ctx.params());
  auto request = read_prompt_request(registry, params);
  if (!request) return request.status();
  const LoadedModel& m = *request->model;
  auto p = read_generate_params(params, m);
  if (!p) return p.status();
  if (Status s = check_prompts(m.architecture, request->prompts); !s) return s;
  RequestSaes saes = m.saes->snapshot();
  auto interventions = generation_interventions(ctx, m, *p, request->prompts, saes);
  if (!interventions) return interventions.status();
  GenerateSteps steps(ctx, m, *p, request->prompts.size());
  auto on_step = [&steps](const std::vector<std::int64_t>& tokens, std::vector<bool>& finished) {
    return steps.on_step(tokens, finished);
  };
  // A request whose stream is behind sits out steps (unless it stopped: then its next step ends it).
  bool sends = p->stream || p->ops;
  SchedulerCaller caller{[&ctx] { return ctx.stopped(); },
                         [&ctx, sends] { return !sends || ctx.data_credit() > 0 || ctx.stopped(); }};
  // Static steps run alone: their shapes (and CUDA graph) are fixed for one request.
  Result<Generated> generated =
      p->options.steps == DecodeSteps::dynamic
          ? m.scheduler->generate(request->prompts, p->options, on_step, interventions->get(), caller)
          : m.scheduler->generate_alone(request->prompts, p->options, on_step, interventions->get(), caller);
  if (!generated) return generated.status();
  if (Status stopped = ctx.stop_reason(); !stopped) return stopped;
  if (!steps.stream_error()) return steps.stream_error();
  return generate_result(m, *request, p->options, *generated, steps.stop_cut());
}

}  // namespace gpubox::modeld
