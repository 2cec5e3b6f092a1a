#include "model/modeld/scheduler/generation.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <c10/core/Event.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/InferenceMode.h>
#include <fmt/format.h>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <set>

#include "base/thread_annotations.h"
#include "model/modeld/gpu/step_graph.h"

namespace gpubox::modeld {
namespace {

using at::Tensor;

}  // namespace

// Sampling is by the exponential race (the argmax of p / E with E ~ Exp(1) is
// a draw from p, as multinomial's would be), which needs no copy to the host
// and no device-side assert. A row whose probabilities are not finite gets -1
// (GenerationRows refuses it once it reads the token). Greedy marks the same
// rows: argmax takes a NaN for the largest, so the logit it picked is not
// finite exactly where the row holds a NaN or +inf or is all -inf.
Tensor pick_tokens(Tensor logits, const SamplingOptions& options, at::Generator& generator) {
  if (options.temperature <= 0) {
    Tensor picked = logits.argmax(-1);
    Tensor best = logits.gather(-1, picked.unsqueeze(-1)).squeeze(-1);
    return picked.masked_fill(best.isfinite().logical_not(), -1);
  }
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
  Tensor probabilities = logits.softmax(-1);
  Tensor race = at::empty_like(probabilities).exponential_(1.0, generator).clamp_min_(1e-30);
  Tensor picked = (probabilities / race).argmax(-1);
  return picked.masked_fill(probabilities.isfinite().all(-1).logical_not(), -1);
}

void HostTokens::start(const Tensor& tokens) {
  if (!device_.is_cuda()) {
    host_ = tokens;
    return;
  }
  std::int64_t count = tokens.numel();
  if (!pinned_.defined() || pinned_.numel() < count) {
    pinned_ = at::empty({std::max<std::int64_t>(count, 64)}, at::TensorOptions().dtype(at::kLong).pinned_memory(true));
  }
  host_ = pinned_.narrow(0, 0, count);
  host_.copy_(tokens, /*non_blocking=*/true);
  copied_ = c10::Event(device_.type());
  copied_->record(c10::impl::getDeviceGuardImpl(device_.type())->getStream(device_));
}

const Tensor& HostTokens::wait() {
  if (copied_) copied_->synchronize();
  copied_.reset();
  return host_;
}

at::Generator sampling_generator(c10::Device device, std::uint64_t seed) {
  if (device.is_cpu()) return at::make_generator<at::CPUGeneratorImpl>(seed);
  at::Generator shared = at::globalContext().defaultGenerator(device);  // shares the default's state
  at::Generator generator;
  {
    // The generator's mutex is LibTorch's own std::mutex, which LibTorch locks too: no gpubox::Mutex can stand in.
    std::lock_guard<std::mutex> lock(shared.mutex());  // thread-safety exception: LibTorch's mutex
    generator = shared.clone();
  }
  generator.set_current_seed(seed);
  return generator;
}

namespace {

// The forward passes of one generation: the prompt's, then one token per row
// per pass, dynamic or at fixed shapes (options.steps), the fixed ones maybe
// replayed as a CUDA graph. Passes with interventions are always dynamic.
class StepRunner {
 public:
  StepRunner(const Decoder& decoder, const ForwardInput& prompt, std::int64_t new_tokens, DecodeSteps mode,
             PassHooks* passes, KvCache* given_cache, StepGraphs* graphs)
      : decoder_(decoder), prompt_(prompt), passes_(passes), fixed_(mode != DecodeSteps::dynamic && !passes) {
    std::int64_t batch = prompt.ids.size(0), length = prompt.ids.size(1);
    if (mode == DecodeSteps::graph) {
      if (passes) {
        log_once("decode steps with interventions run eagerly, not as a CUDA graph");
      } else if (decoder.devices().size() > 1) {
        log_once("CUDA graphs asked for on a split model: its decode steps run eagerly");
      } else if (!decoder.device().is_cuda()) {
        log_once("CUDA graphs asked for on a " + decoder.device().str() + " model: its decode steps run eagerly");
      } else {
        want_graph_ = true;
      }
    }
    if (given_cache) {
      TORCH_CHECK(given_cache->capacity == length + new_tokens && given_cache->length == 0,
                  "a generation's cache must be empty and hold its prompt and new tokens");
      cache_ = *given_cache;
      if (fixed_) cache_.zero();  // fixed steps attend over the whole capacity: unwritten slots must be zeros, not old values
    } else {
      cache_ = decoder.new_cache(batch, length + new_tokens, fixed_);
    }
    positions_ = prompt.positions.narrow(1, length - 1, 1).clone();
    key_mask_ = prompt.key_mask;
    if (fixed_) {
      auto on_device = at::TensorOptions().dtype(at::kLong).device(decoder.device());
      ids_ = at::zeros({batch, 1}, on_device);
      slot_ = at::full({1}, length - 1, on_device);
      key_mask_ = at::cat({prompt.key_mask, at::ones({batch, new_tokens}, prompt.key_mask.options())}, 1);
    }
    // A graph outlives its generation only on the pool (a cache of its own is freed after it).
    if (want_graph_ && given_cache && graphs) {
      graphs_ = graphs;
      key_ = {batch, length + new_tokens, cache_.keys.empty() ? nullptr : cache_.keys[0].data_ptr()};
      if (StepGraphs::Entry* kept = graphs->find(key_)) {  // this generation's inputs into the graph's buffers
        kept->ids.copy_(ids_), kept->positions.copy_(positions_), kept->key_mask.copy_(key_mask_), kept->slot.copy_(slot_);
        ids_ = kept->ids, positions_ = kept->positions, key_mask_ = kept->key_mask, slot_ = kept->slot;
        graph_ = kept->graph.get();
        want_graph_ = false;
      }
    }
  }

  Result<Tensor> prompt_pass() { return run_pass(prompt_, 0); }

  // Pass pass, feeding feed ([batch] int64, on the model's device) at the next position of every row.
  Result<Tensor> next_pass(const Tensor& feed, std::int64_t pass) {
    if (!fixed_) {
      positions_ = positions_ + 1;
      key_mask_ = at::cat({key_mask_, at::ones({key_mask_.size(0), 1}, key_mask_.options())}, 1);
      return run_pass({feed.view({-1, 1}), positions_, key_mask_, prompt_.padded, Tensor()}, pass);
    }
    ids_.copy_(feed.view({-1, 1}));
    positions_.add_(1);
    slot_.add_(1);
    auto step = [this] { return decoder_.forward({ids_, positions_, key_mask_, true, slot_}, &cache_, true); };
    if (want_graph_ && !graph_) {
      auto captured = capture_step_graph(decoder_.device(), step);
      want_graph_ = false;
      if (!captured) {
        log_once("decode steps run eagerly: " + captured.status().message());
      } else if (graphs_) {
        graph_ = graphs_->keep({key_, ids_, positions_, key_mask_, slot_, std::move(*captured)}).graph.get();
      } else {
        owned_graph_ = std::move(*captured);
        graph_ = owned_graph_.get();
      }
    }
    if (graph_) return graph_->replay();
    return step();
  }

 private:
  // Each distinct line once per process (a fallback is said once, not per generation).
  static void log_once(const std::string& line) {
    static Mutex mutex;
    static std::set<std::string> said GUARDED_BY(mutex);
    MutexLock lock(mutex);
    if (said.insert(line).second) std::fprintf(stderr, "gpubox-modeld: %s\n", line.c_str());
  }

  Result<Tensor> run_pass(const ForwardInput& input, std::int64_t pass) {
    Hooks* hooks = nullptr;
    if (passes_) {
      auto begun = passes_->begin(pass, input.ids.size(1), cache_.length + input.ids.size(1));
      if (!begun) return begun.status();
      hooks = *begun;
    }
    Tensor logits = decoder_.forward(input, &cache_, true, hooks);
    if (passes_) {
      if (Status s = passes_->end(pass); !s) return s;
    }
    return logits;
  }

  const Decoder& decoder_;
  const ForwardInput& prompt_;
  PassHooks* passes_;
  bool fixed_;
  bool want_graph_ = false;
  KvCache cache_;
  Tensor positions_, key_mask_;  // of the last pass
  Tensor ids_, slot_;            // fixed steps' inputs, at fixed addresses
  StepGraph* graph_ = nullptr;   // replayed: graphs_'s, or owned_graph_
  StepGraphs* graphs_ = nullptr;  // where this generation's graph is kept (null: not kept)
  StepGraphs::Key key_;
  std::unique_ptr<StepGraph> owned_graph_;
};

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
  bool padded = std::any_of(prompts.begin(), prompts.end(),
                            [&](const auto& p) { return static_cast<std::int64_t>(p.size()) != length; });
  return {ids.to(device), positions.to(device), mask.to(device), padded, at::Tensor()};
}

std::int64_t new_token_limit(const Architecture& arch, const SamplingOptions& options, std::int64_t length) {
  return std::min(options.max_new_tokens, arch.max_positions - length);
}

Result<Generated> generate(const Decoder& decoder, const std::vector<std::vector<std::int64_t>>& prompts,
                           const SamplingOptions& options, const StepCallback& on_step, PassHooks* passes,
                           KvCache* cache, StepGraphs* graphs) {
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
  at::Generator generator = sampling_generator(decoder.device(), options.seed.value_or(at::default_rng_seed_val));
  HostTokens host_tokens(decoder.device());
  StepRunner passes_run(decoder, input, new_tokens, options.steps, passes, cache, graphs);
  auto first = passes_run.prompt_pass();
  if (!first) return first.status();
  Tensor logits = *first;
  GenerationRows rows(arch, options, batch);
  for (std::int64_t step = 0; step < new_tokens; ++step) {
    Tensor next = pick_tokens(logits.select(1, 0).to(at::kFloat), options, generator);
    host_tokens.start(next);
    // On a GPU, without interventions, the next pass is queued before this
    // step's tokens reach the host: a finished row's output is never read, so
    // its own token may feed it. Its result is dropped if generation ends here.
    bool ahead = decoder.device().is_cuda() && !passes && step + 1 < new_tokens;
    Result<Tensor> ahead_logits = Tensor();
    if (ahead) ahead_logits = passes_run.next_pass(next.clamp_min(0), step + 1);
    const Tensor& host = host_tokens.wait();
    auto going = rows.take(step, host, on_step);
    if (!going) return going.status();
    if (!*going || rows.all_finished() || step + 1 == new_tokens) break;
    if (ahead) {
      if (!ahead_logits) return ahead_logits.status();
      logits = *ahead_logits;
      continue;
    }
    auto next_logits = passes_run.next_pass(rows.feed(host, decoder.device()), step + 1);
    if (!next_logits) return next_logits.status();
    logits = *next_logits;
  }
  return std::move(rows.result());
}

GenerationRows::GenerationRows(const Architecture& architecture, const SamplingOptions& options, std::size_t rows)
    : architecture_(architecture), options_(options), finished_(rows, false), step_tokens_(rows) {
  out_.tokens.resize(rows);
  out_.finish_reasons.assign(rows, "length");
}

Result<bool> GenerationRows::take(std::int64_t step, const Tensor& picked_tokens, const StepCallback& on_step) {
  auto picked = picked_tokens.accessor<std::int64_t, 1>();
  std::size_t rows = finished_.size();
  for (std::size_t row = 0; row < rows; ++row) {
    if (!finished_[row] && picked[static_cast<std::int64_t>(row)] < 0) {  // pick_tokens' mark
      return Status(ErrorCode::invalid_request,
                    fmt::format("cannot pick token {}: the logits hold NaN or infinities (an op with "
                                "allow_nonfinite, or values beyond the dtype's range)", step));
    }
  }
  for (std::size_t row = 0; row < rows; ++row) {
    if (finished_[row]) {
      step_tokens_[row] = -1;
      continue;
    }
    std::int64_t token = picked[static_cast<std::int64_t>(row)];
    step_tokens_[row] = token;
    out_.tokens[row].push_back(token);
    const auto& eos_ids = architecture_.eos_ids;
    bool eos = options_.stop_at_eos && std::find(eos_ids.begin(), eos_ids.end(), token) != eos_ids.end();
    bool stop = std::find(options_.stop_ids.begin(), options_.stop_ids.end(), token) != options_.stop_ids.end();
    if (eos || stop) {
      finished_[row] = true;
      out_.finish_reasons[row] = eos ? "eos" : "stop";
    }
  }
  std::vector<bool> before = finished_;
  if (on_step && !on_step(step_tokens_, finished_)) {
    for (std::size_t row = 0; row < rows; ++row) {
      if (!finished_[row]) out_.finish_reasons[row] = "cancelled";
    }
    return false;
  }
  for (std::size_t row = 0; row < rows; ++row) {
    if (finished_[row] && !before[row]) out_.finish_reasons[row] = "stop";
  }
  return true;
}

bool GenerationRows::all_finished() const {
  return std::all_of(finished_.begin(), finished_.end(), [](bool f) { return f; });
}

Tensor GenerationRows::feed(const Tensor& picked, c10::Device device) const {
  Tensor ids = picked.clone();
  for (std::size_t row = 0; row < finished_.size(); ++row) {
    if (finished_[row]) ids[static_cast<std::int64_t>(row)] = architecture_.pad_id.value_or(0);
  }
  return ids.to(device);
}

}  // namespace gpubox::modeld
