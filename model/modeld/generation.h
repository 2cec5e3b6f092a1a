// Generation: prompts in, tokens out, one step at a time with a KV cache —
// greedy, or sampled with temperature, top-k and top-p from a seeded
// generator, as transformers' generate() does them.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "model/modeld/decoder.h"
#include "rpc/status.h"

namespace gpubox::modeld {

struct SamplingOptions {
  std::int64_t max_new_tokens = 32;
  double temperature = 0;   // 0: greedy
  std::int64_t top_k = 0;   // 0: off
  double top_p = 1.0;       // 1: off
  std::optional<std::uint64_t> seed;
  std::vector<std::int64_t> stop_ids;  // besides EOS
  bool stop_at_eos = true;
};

// Called after each step with the token each row produced (-1 for a row that
// had already finished). It may mark rows finished (a stop string matched);
// returning false stops the whole generation (cancelled).
using StepCallback = std::function<bool(const std::vector<std::int64_t>& tokens, std::vector<bool>& finished)>;

struct Generated {
  std::vector<std::vector<std::int64_t>> tokens;  // new tokens per row
  std::vector<std::string> finish_reasons;        // "eos", "stop", "length", "cancelled"
};

// Left-pads the prompts into one batch. An empty prompt, an id outside the
// vocabulary or a prompt over the context length is invalid_request.
Result<Generated> generate(const Decoder& decoder, const std::vector<std::vector<std::int64_t>>& prompts,
                           const SamplingOptions& options, const StepCallback& on_step);

// The batch of forward(): ids, positions and key mask of left-padded prompts.
ForwardInput left_padded_batch(const std::vector<std::vector<std::int64_t>>& prompts, c10::Device device);

// invalid_request when an id is outside [0, vocab) or a prompt is empty or longer than the context.
Status check_prompts(const Architecture& architecture, const std::vector<std::vector<std::int64_t>>& prompts);

}  // namespace gpubox::modeld
