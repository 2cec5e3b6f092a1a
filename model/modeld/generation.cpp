#include "model/modeld/generation.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>
#include <fmt/format.h>

namespace gpubox::modeld {
namespace {

using at::Tensor;

// Next tokens [batch] from last-position logits [batch, vocab] (fp32).
Tensor pick_tokens(Tensor logits, const SamplingOptions& options, at::Generator& generator) {
  if (options.temperature <= 0) return logits.argmax(-1);
  logits = logits / options.temperature;
  if (options.top_k > 0 && options.top_k < logits.size(-1)) {
    Tensor kth = std::get<0>(logits.topk(options.top_k, -1)).narrow(-1, options.top_k - 1, 1);
    logits = logits.masked_fill(logits < kth, -std::numeric_limits<float>::infinity());
  }
  if (options.top_p < 1.0) {
    auto [sorted, order] = logits.sort(-1, false);
    Tensor cumulative = sorted.softmax(-1).cumsum(-1);
    Tensor remove_sorted = cumulative <= (1.0 - options.top_p);
    remove_sorted.narrow(-1, remove_sorted.size(-1) - 1, 1).fill_(false);  // keep at least the most likely
    Tensor remove = remove_sorted.scatter(-1, order, remove_sorted);
    logits = logits.masked_fill(remove, -std::numeric_limits<float>::infinity());
  }
  Tensor probabilities = logits.softmax(-1).to(at::kCPU);
  return at::multinomial(probabilities, 1, false, generator).squeeze(-1).to(logits.device());
}

}  // namespace

Status check_prompts(const Architecture& arch, const std::vector<std::vector<std::int64_t>>& prompts) {
  if (prompts.empty()) return {ErrorCode::invalid_request, "no prompts: give at least one"};
  for (std::size_t row = 0; row < prompts.size(); ++row) {
    const auto& prompt = prompts[row];
    if (prompt.empty()) return {ErrorCode::invalid_request, fmt::format("prompt {} is empty", row)};
    if (static_cast<std::int64_t>(prompt.size()) > arch.max_positions) {
      return {ErrorCode::invalid_request, fmt::format("prompt {} has {} tokens, over the model's context length of {}",
                                                      row, prompt.size(), arch.max_positions)};
    }
    for (std::size_t i = 0; i < prompt.size(); ++i) {
      if (prompt[i] < 0 || prompt[i] >= arch.vocab_size) {
        return {ErrorCode::invalid_request, fmt::format("prompt {} token {}: id {} is outside the vocabulary [0, {})",
                                                        row, i, prompt[i], arch.vocab_size)};
      }
    }
  }
  return Status::ok();
}

ForwardInput left_padded_batch(const std::vector<std::vector<std::int64_t>>& prompts, c10::Device device) {
  std::int64_t batch = static_cast<std::int64_t>(prompts.size());
  std::int64_t length = 0;
  for (const auto& p : prompts) length = std::max<std::int64_t>(length, static_cast<std::int64_t>(p.size()));
  Tensor ids = at::zeros({batch, length}, at::kLong);
  Tensor mask = at::zeros({batch, length}, at::kBool);
  auto id = ids.accessor<std::int64_t, 2>();
  auto real = mask.accessor<bool, 2>();
  for (std::int64_t row = 0; row < batch; ++row) {
    const auto& prompt = prompts[static_cast<std::size_t>(row)];
    std::int64_t pad = length - static_cast<std::int64_t>(prompt.size());
    for (std::size_t i = 0; i < prompt.size(); ++i) {
      id[row][pad + static_cast<std::int64_t>(i)] = prompt[i];
      real[row][pad + static_cast<std::int64_t>(i)] = true;
    }
  }
  Tensor positions = (mask.to(at::kLong).cumsum(-1) - 1).clamp_min(0);
  return {ids.to(device), positions.to(device), mask.to(device)};
}

std::int64_t new_token_limit(const Architecture& arch, const SamplingOptions& options, std::int64_t length) {
  return std::min(options.max_new_tokens, arch.max_positions - length);
}

Result<Generated> generate(const Decoder& decoder, const std::vector<std::vector<std::int64_t>>& prompts,
                           const SamplingOptions& options, const StepCallback& on_step, PassHooks* passes) {
  const Architecture& arch = decoder.architecture();
  if (Status s = check_prompts(arch, prompts); !s) return s;
  if (options.max_new_tokens < 0) return Status(ErrorCode::invalid_request, "max_new_tokens must be 0 or more");
  c10::InferenceMode inference;
  std::size_t batch = prompts.size();
  ForwardInput input = left_padded_batch(prompts, decoder.device());
  std::int64_t length = input.ids.size(1);
  std::int64_t new_tokens = new_token_limit(arch, options, length);
  Generated out;
  out.tokens.resize(batch);
  out.finish_reasons.assign(batch, "length");
  if (new_tokens <= 0) return out;
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(options.seed.value_or(at::default_rng_seed_val));
  KvCache cache = decoder.new_cache(static_cast<std::int64_t>(batch), length + new_tokens);
  // One forward pass with this pass's hooks, if any.
  auto run_pass = [&](const ForwardInput& pass_input, std::int64_t pass) -> Result<Tensor> {
    Hooks* hooks = nullptr;
    if (passes) {
      auto begun = passes->begin(pass, pass_input.ids.size(1), cache.length + pass_input.ids.size(1));
      if (!begun) return begun.status();
      hooks = *begun;
    }
    Tensor pass_logits = decoder.forward(pass_input, &cache, true, hooks);
    if (passes) {
      if (Status s = passes->end(pass); !s) return s;
    }
    return pass_logits;
  };
  auto first = run_pass(input, 0);
  if (!first) return first.status();
  Tensor logits = *first;
  Tensor positions = input.positions.narrow(1, length - 1, 1);
  Tensor key_mask = input.key_mask;
  std::vector<bool> finished(batch, false);
  std::vector<std::int64_t> step_tokens(batch);
  for (std::int64_t step = 0; step < new_tokens; ++step) {
    Tensor next;
    try {
      next = pick_tokens(logits.select(1, 0).to(at::kFloat), options, generator).to(at::kCPU);
    } catch (const c10::Error& e) {  // what the caller's request did to the logits, not an internal fault
      return Status(ErrorCode::invalid_request,
                    fmt::format("cannot sample token {}: the logits hold NaN or infinities (an op with allow_nonfinite, "
                                "or values beyond the dtype's range): {}", step, e.what_without_backtrace()));
    }
    auto picked = next.accessor<std::int64_t, 1>();
    for (std::size_t row = 0; row < batch; ++row) {
      if (finished[row]) {
        step_tokens[row] = -1;
        continue;
      }
      std::int64_t token = picked[static_cast<std::int64_t>(row)];
      step_tokens[row] = token;
      out.tokens[row].push_back(token);
      bool eos = options.stop_at_eos && std::find(arch.eos_ids.begin(), arch.eos_ids.end(), token) != arch.eos_ids.end();
      bool stop = std::find(options.stop_ids.begin(), options.stop_ids.end(), token) != options.stop_ids.end();
      if (eos || stop) {
        finished[row] = true;
        out.finish_reasons[row] = eos ? "eos" : "stop";
      }
    }
    std::vector<bool> before = finished;
    if (on_step && !on_step(step_tokens, finished)) {
      for (std::size_t row = 0; row < batch; ++row) {
        if (!finished[row]) out.finish_reasons[row] = "cancelled";
      }
      return out;
    }
    for (std::size_t row = 0; row < batch; ++row) {
      if (finished[row] && !before[row]) out.finish_reasons[row] = "stop";
    }
    if (std::all_of(finished.begin(), finished.end(), [](bool f) { return f; }) || step + 1 == new_tokens) break;
    // Finished rows keep stepping on a pad id (their output is ignored), as transformers does.
    Tensor feed = next.clone();
    for (std::size_t row = 0; row < batch; ++row) {
      if (finished[row]) feed[static_cast<std::int64_t>(row)] = arch.pad_id.value_or(0);
    }
    positions = positions + 1;
    key_mask = at::cat({key_mask, at::ones({static_cast<std::int64_t>(batch), 1}, key_mask.options())}, 1);
    auto next_logits = run_pass({feed.view({-1, 1}).to(decoder.device()), positions, key_mask}, step + 1);
    if (!next_logits) return next_logits.status();
    logits = *next_logits;
  }
  return out;
}

}  // namespace gpubox::modeld
