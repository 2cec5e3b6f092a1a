#include "model/modeld/scheduler/decode_profile.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include <torch/csrc/autograd/profiler_kineto.h>

#include "model/modeld/scheduler/generation.h"
#include "model/modeld/decoder/tensor_wire.h"

namespace gpubox::modeld {
namespace {

using Clock = std::chrono::steady_clock;
namespace profiler = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

// Ops that only make a view or read metadata: no kernel on a device, no pass
// over memory (aten::to and aten::contiguous when they copy nothing). Such an
// op computes only when an op nested in it does (a reshape that has to copy).
bool view_only(const std::string& name) {
  static const std::set<std::string> views = {
      "aten::view", "aten::reshape", "aten::_reshape_alias", "aten::_unsafe_view", "aten::view_as",
      "aten::transpose", "aten::t", "aten::permute", "aten::narrow", "aten::slice", "aten::select",
      "aten::split", "aten::split_with_sizes", "aten::chunk", "aten::unbind", "aten::unsqueeze",
      "aten::squeeze", "aten::expand", "aten::as_strided", "aten::alias", "aten::unflatten", "aten::flatten",
      "aten::detach", "aten::to", "aten::contiguous", "aten::lift_fresh", "aten::resolve_conj", "aten::resolve_neg"};
  return views.count(name) > 0;
}

// Per decode step (and, inside the decoder's layer scopes, per layer): what the profiled steps ran.
struct StepCounts {
  double ops = 0, top_level_ops = 0, compute_ops = 0, device_kernels = 0;
  double layer_ops = 0, layer_compute_ops = 0;  // top-level ops inside a layer's scope, per layer
  std::map<std::string, double> top_level_by_name, layer_compute_by_name;
};

StepCounts count_events(const std::vector<profiler::KinetoEvent>& events, std::int64_t steps, std::int64_t layers) {
  std::vector<const profiler::KinetoEvent*> ops, scopes;
  StepCounts counts;
  for (const auto& event : events) {
    if (event.deviceType() != c10::DeviceType::CPU) {
      counts.device_kernels += 1;
    } else if (event.name().rfind("aten::", 0) == 0) {
      ops.push_back(&event);
    } else if (event.name() == kLayerScope) {
      scopes.push_back(&event);
    }
  }
  auto by_start = [](auto* a, auto* b) {
    return std::make_pair(a->startThreadId(), a->startNs()) < std::make_pair(b->startThreadId(), b->startNs());
  };
  std::sort(ops.begin(), ops.end(), by_start);
  std::sort(scopes.begin(), scopes.end(), by_start);
  // Top-level ops (not inside another op's interval on the same thread), each
  // with whether it, or an op nested in it, computes.
  struct TopLevel {
    const profiler::KinetoEvent* op;
    bool computes;
  };
  std::vector<TopLevel> top;
  for (const auto* op : ops) {
    counts.ops += 1;
    bool nested = !top.empty() && op->startThreadId() == top.back().op->startThreadId() &&
                  op->startNs() < top.back().op->endNs();
    if (nested) {
      top.back().computes = top.back().computes || !view_only(op->name());
    } else {
      top.push_back({op, !view_only(op->name())});
    }
  }
  auto in_layer = [&](const profiler::KinetoEvent* op) {
    return std::any_of(scopes.begin(), scopes.end(), [&](const profiler::KinetoEvent* scope) {
      return scope->startThreadId() == op->startThreadId() && scope->startNs() <= op->startNs() &&
             op->endNs() <= scope->endNs();
    });
  };
  for (const TopLevel& t : top) {
    counts.top_level_ops += 1;
    counts.top_level_by_name[t.op->name()] += 1;
    if (t.computes) counts.compute_ops += 1;
    if (!in_layer(t.op)) continue;
    counts.layer_ops += 1;
    if (t.computes) {
      counts.layer_compute_ops += 1;
      counts.layer_compute_by_name[t.op->name()] += 1;
    }
  }
  double per = 1.0 / static_cast<double>(steps), per_layer = per / static_cast<double>(std::max<std::int64_t>(layers, 1));
  counts.ops *= per;
  counts.top_level_ops *= per;
  counts.compute_ops *= per;
  counts.device_kernels *= per;
  counts.layer_ops *= per_layer;
  counts.layer_compute_ops *= per_layer;
  for (auto& [name, n] : counts.top_level_by_name) n *= per;
  for (auto& [name, n] : counts.layer_compute_by_name) n *= per_layer;
  return counts;
}

// The most frequent names of a count, most frequent first.
nlohmann::json most_frequent(const std::map<std::string, double>& by_name, std::size_t limit) {
  std::vector<std::pair<std::string, double>> sorted(by_name.begin(), by_name.end());
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  nlohmann::json out = nlohmann::json::array();
  for (std::size_t i = 0; i < sorted.size() && i < limit; ++i) out.push_back({sorted[i].first, sorted[i].second});
  return out;
}

}  // namespace

Result<nlohmann::json> profile_decode(const Decoder& decoder, BatchScheduler& scheduler,
                                      const DecodeProfileOptions& options) {
  const Architecture& arch = decoder.architecture();
  if (options.steps < 1 || options.prompt_tokens < 1) {
    return Status(ErrorCode::invalid_request, "--steps and --prompt-tokens must be 1 or more");
  }
  std::vector<std::int64_t> prompt;
  for (std::int64_t i = 0; i < options.prompt_tokens; ++i) prompt.push_back(3 + (i * 7919) % std::max<std::int64_t>(arch.vocab_size - 3, 1));
  SamplingOptions sampling;
  sampling.max_new_tokens = options.steps + 1;
  sampling.stop_at_eos = false;
  if (new_token_limit(arch, sampling, options.prompt_tokens) < sampling.max_new_tokens) {
    return Status(ErrorCode::invalid_request, "the model's context is too short for that many steps");
  }
  // Step k's callback comes once token k is on the host: between two callbacks lies one decode step.
  std::vector<double> step_ms;
  Clock::time_point last;
  std::int64_t calls = 0;
  auto timed = [&](const std::vector<std::int64_t>&, std::vector<bool>&) {
    Clock::time_point now = Clock::now();
    if (calls++ > 0) step_ms.push_back(std::chrono::duration<double, std::milli>(now - last).count());
    last = now;
    return true;
  };
  for (int run = 0; run < 2; ++run) {  // a warm-up, then the timed run
    step_ms.clear();
    calls = 0;
    if (auto generated = scheduler.generate({prompt}, sampling, timed, nullptr, {}); !generated) {
      return generated.status();
    }
  }
  std::sort(step_ms.begin(), step_ms.end());

  std::set<ActivityType> activities{ActivityType::CPU};
  if (decoder.device().is_cuda()) activities.insert(ActivityType::CUDA);
  ProfilerConfig config(ProfilerState::KINETO);
  profiler::prepareProfiler(config, activities);
  std::unique_ptr<profiler::ProfilerResult> result;
  calls = 0;
  auto profiled = [&](const std::vector<std::int64_t>&, std::vector<bool>&) {
    if (calls == 0) profiler::enableProfiler(config, activities);
    if (calls++ < options.steps) return true;
    result = profiler::disableProfiler();
    return false;
  };
  auto generated = scheduler.generate({prompt}, sampling, profiled, nullptr, {});
  if (!result && calls > 0) result = profiler::disableProfiler();
  if (!generated) return generated.status();
  if (!result) return Status(ErrorCode::internal, "the profiler recorded nothing");
  StepCounts counts = count_events(result->events(), options.steps, arch.num_layers);
  double layers = static_cast<double>(std::max<std::int64_t>(arch.num_layers, 1));
  return nlohmann::json{{"device", decoder.device().str()},
                        {"dtype", dtype_wire_name(decoder.dtype())},
                        {"layers", arch.num_layers},
                        {"weight_bytes", decoder.weight_bytes()},
                        {"prompt_tokens", options.prompt_tokens},
                        {"steps", options.steps},
                        {"ms_per_token", step_ms[step_ms.size() / 2]},
                        {"ms_per_token_min", step_ms.front()},
                        {"ops_per_step", counts.ops},
                        {"top_level_ops_per_step", counts.top_level_ops},
                        {"top_level_ops_per_layer_per_step", counts.top_level_ops / layers},
                        {"compute_ops_per_step", counts.compute_ops},
                        {"layer_ops_per_layer", counts.layer_ops},
                        {"layer_compute_ops_per_layer", counts.layer_compute_ops},
                        {"device_kernels_per_step", counts.device_kernels},
                        {"top_ops", most_frequent(counts.top_level_by_name, 15)},
                        {"layer_compute_ops", most_frequent(counts.layer_compute_by_name, 15)}};
}

}  // namespace gpubox::modeld
