#include "model/modeld/decode_profile.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include <torch/csrc/autograd/profiler_kineto.h>

#include "model/modeld/generation.h"
#include "model/modeld/tensor_wire.h"

namespace gpubox::modeld {
namespace {

using Clock = std::chrono::steady_clock;
namespace profiler = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

// Per decode step: what the profiled steps ran, divided by their number.
struct StepCounts {
  double ops = 0, top_level_ops = 0, device_kernels = 0;
  std::map<std::string, double> top_level_by_name;
};

StepCounts count_events(const std::vector<profiler::KinetoEvent>& events, std::int64_t steps) {
  std::vector<const profiler::KinetoEvent*> ops;
  StepCounts counts;
  for (const auto& event : events) {
    if (event.deviceType() != c10::DeviceType::CPU) {
      counts.device_kernels += 1;
    } else if (event.name().rfind("aten::", 0) == 0) {
      ops.push_back(&event);
    }
  }
  // An op inside another op's interval on the same thread is nested in it.
  std::sort(ops.begin(), ops.end(), [](auto* a, auto* b) {
    return std::make_pair(a->startThreadId(), a->startNs()) < std::make_pair(b->startThreadId(), b->startNs());
  });
  std::uint64_t thread = 0, open_until = 0;
  for (const auto* op : ops) {
    counts.ops += 1;
    bool nested = op->startThreadId() == thread && op->startNs() < open_until;
    if (nested) continue;
    thread = op->startThreadId();
    open_until = op->endNs();
    counts.top_level_ops += 1;
    counts.top_level_by_name[op->name()] += 1;
  }
  double per = 1.0 / static_cast<double>(steps);
  counts.ops *= per;
  counts.top_level_ops *= per;
  counts.device_kernels *= per;
  for (auto& [name, n] : counts.top_level_by_name) n *= per;
  return counts;
}

}  // namespace

Result<nlohmann::json> profile_decode(const Decoder& decoder, const DecodeProfileOptions& options) {
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
    if (auto generated = generate(decoder, {prompt}, sampling, timed); !generated) return generated.status();
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
  auto generated = generate(decoder, {prompt}, sampling, profiled);
  if (!result && calls > 0) result = profiler::disableProfiler();
  if (!generated) return generated.status();
  if (!result) return Status(ErrorCode::internal, "the profiler recorded nothing");
  StepCounts counts = count_events(result->events(), options.steps);

  std::vector<std::pair<std::string, double>> by_count(counts.top_level_by_name.begin(), counts.top_level_by_name.end());
  std::sort(by_count.begin(), by_count.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  nlohmann::json top = nlohmann::json::array();
  for (std::size_t i = 0; i < by_count.size() && i < 15; ++i) top.push_back({by_count[i].first, by_count[i].second});
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
                        {"device_kernels_per_step", counts.device_kernels},
                        {"top_ops", top}};
}

}  // namespace gpubox::modeld
