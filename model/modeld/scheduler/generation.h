// Generation: prompts in, tokens out, one step at a time with a KV cache —
// greedy, or sampled with temperature, top-k and top-p from a seeded
// generator, as transformers' generate() does them.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Generator.h>
#include <c10/core/Event.h>

#include "model/modeld/decoder/decoder.h"
#include "model/modeld/gpu/step_graph.h"
#include "base/status.h"

namespace gpubox::modeld {

// How decode steps without interventions run (steps with them always run dynamically).
enum class DecodeSteps {
  dynamic,  // the cache grows by a token per step, attention over the filled part (the default)
  fixed,    // static shapes: over the whole preallocated cache, masked, as a CUDA graph replays it
  graph,    // fixed, captured once as a CUDA graph and replayed (cuda only; elsewhere fixed, logged once)
};

struct SamplingOptions {
  std::int64_t max_new_tokens = 32;
  double temperature = 0;   // 0: greedy
  std::int64_t top_k = 0;   // 0: off
  double top_p = 1.0;       // 1: off
  std::optional<std::uint64_t> seed;
  std::vector<std::int64_t> stop_ids;  // besides EOS
  bool stop_at_eos = true;
  DecodeSteps steps = DecodeSteps::dynamic;
};

// Called after each step with the token each row produced (-1 for a row that
// had already finished). It may mark rows finished (a stop string matched);
// returning false stops the whole generation (cancelled).
using StepCallback = std::function<bool(const std::vector<std::int64_t>& tokens, std::vector<bool>& finished)>;

// Interventions during generation: the Hooks of each forward pass (pass 0
// reads the prompt and picks the first token; pass k feeds token k-1 and picks
// token k), and what to do once that pass ran (send its captures).
class PassHooks {
 public:
  virtual ~PassHooks() = default;
  // tokens: the positions this pass adds; keys: the positions it attends to. nullptr: no hooks at this pass.
  virtual Result<Hooks*> begin(std::int64_t pass, std::int64_t tokens, std::int64_t keys) = 0;
  virtual Status end(std::int64_t pass) = 0;
};

struct Generated {
  std::vector<std::vector<std::int64_t>> tokens;  // new tokens per row
  std::vector<std::string> finish_reasons;        // "eos", "stop", "length", "cancelled"
};

// What a generation keeps between steps: each row's new tokens, which rows
// finished and why. generate() and the batch scheduler share it, so that a
// request ends the same way alone and in a batch.
class GenerationRows {
 public:
  GenerationRows(const Architecture& architecture, const SamplingOptions& options, std::size_t rows);
  // Takes step's tokens (picked: [rows] int64 on the host, pick_tokens' -1 where
  // a row's logits were not finite: invalid_request if that row is live), then
  // gives them to on_step. false: on_step cancelled (the live rows end "cancelled").
  Result<bool> take(std::int64_t step, const at::Tensor& picked, const StepCallback& on_step);
  bool all_finished() const;
  // The next pass's ids [rows] on device: picked, with the pad id where a row finished (its output is ignored, as transformers does).
  at::Tensor feed(const at::Tensor& picked, c10::Device device) const;
  Generated& result() { return out_; }

 private:
  const Architecture& architecture_;
  const SamplingOptions& options_;
  std::vector<bool> finished_;
  std::vector<std::int64_t> step_tokens_;
  Generated out_;
};

// Next tokens [batch] from last-position logits [batch, vocab] (float32) on
// their device: greedy, or sampled (temperature, top-k, top-p) with generator;
// -1 for a row whose logits are not finite.
at::Tensor pick_tokens(at::Tensor logits, const SamplingOptions& options, at::Generator& generator);
// Tokens picked on a device, copied to the host: on a GPU asynchronously into
// pinned memory (reused, grown as needed) so that wait() blocks only when the
// host needs them and work queued after start() runs meanwhile; on the CPU
// they are the host's already. One thread; one copy in flight.
class HostTokens {
 public:
  explicit HostTokens(c10::Device device) : device_(device) {}
  void start(const at::Tensor& tokens);  // tokens: [n] int64 on the device
  const at::Tensor& wait();              // [n] int64 on the host, valid until the next start()

 private:
  c10::Device device_;
  at::Tensor pinned_, host_;
  std::optional<c10::Event> copied_;
};

// A generator for sampling on device, seeded: the same seed on the same kind of device draws the same tokens.
at::Generator sampling_generator(c10::Device device, std::uint64_t seed);

// Left-pads the prompts into one batch. An empty prompt, an id outside the
// vocabulary or a prompt over the context length is invalid_request. cache:
// where keys and values go (a run of the model's KV pool: capacity the padded
// prompt length + new_token_limit()); none: a cache of its own. graphs: where
// CUDA graphs of steps on cache are kept for later generations of the same shape.
Result<Generated> generate(const Decoder& decoder, const std::vector<std::vector<std::int64_t>>& prompts,
                           const SamplingOptions& options, const StepCallback& on_step, PassHooks* passes = nullptr,
                           KvCache* cache = nullptr, StepGraphs* graphs = nullptr);

// How many tokens generate() makes at most for prompts of this padded length (the context bounds it).
std::int64_t new_token_limit(const Architecture& architecture, const SamplingOptions& options, std::int64_t length);

// The batch of forward(): ids, positions and key mask of left-padded prompts.
ForwardInput left_padded_batch(const std::vector<std::vector<std::int64_t>>& prompts, c10::Device device);

// invalid_request when an id is outside [0, vocab) or a prompt is empty or longer than the context.
Status check_prompts(const Architecture& architecture, const std::vector<std::vector<std::int64_t>>& prompts);

}  // namespace gpubox::modeld
