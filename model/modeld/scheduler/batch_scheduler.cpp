#include "model/modeld/scheduler/batch_scheduler.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <algorithm>
#include <chrono>
#include <fmt/format.h>
#include <optional>

#include "model/modeld/scheduler/method_guard.h"

namespace gpubox::modeld {

using nlohmann::json;

struct BatchScheduler::Job {
  // A job that runs alone, given its run of the pool's blocks when it holds one; empty for a generation in the batch.
  std::function<Result<json>(KvCache*)> work;
  // A generation: what the caller gave (alive until it returns).
  const std::vector<std::vector<std::int64_t>>* prompts = nullptr;
  const SamplingOptions* options = nullptr;
  const StepCallback* on_step = nullptr;
  PassHooks* passes = nullptr;
  SchedulerCaller caller;
  std::int64_t rows = 0, capacity = 0, new_tokens = 0;
  std::uint64_t id = 0;  // Admission's
  // Its state, on the scheduler's thread while it runs.
  bool started = false;
  KvCache cache;
  at::Tensor prompt_logits;  // of the prefill, until its first token is taken
  std::optional<GenerationRows> generation;
  std::optional<at::Generator> generator;
  ForwardInput prompt;
  std::int64_t step = 0;  // tokens taken so far: the number of the next pass
  at::Tensor feed, positions, key_mask;
  // The outcome (read by the caller once done).
  bool done = false;  // under the scheduler's mutex
  Status status;
  Result<json> result = json();
};

namespace {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

constexpr double kRateWindowSeconds = 10;

}  // namespace

BatchScheduler::BatchScheduler(std::string model_name, const Decoder& decoder, std::unique_ptr<KvPool> pool,
                               SchedulerLimits limits)
    : model_name_(std::move(model_name)),
      decoder_(decoder),
      pool_(std::move(pool)),
      limits_(limits),
      admission_(pool_->blocks(), limits.max_batch, limits.max_queue),
      host_tokens_(decoder.device()) {
  thread_ = std::thread([this] { loop(); });
}

BatchScheduler::~BatchScheduler() {
  {
    MutexLock lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

std::shared_ptr<BatchScheduler::Job> BatchScheduler::generation_job(
    const std::vector<std::vector<std::int64_t>>& prompts, const SamplingOptions& options,
    SchedulerCaller caller) const {
  auto job = std::make_shared<Job>();
  job->caller = std::move(caller);
  job->rows = static_cast<std::int64_t>(prompts.size());
  std::int64_t length = 0;
  for (const auto& prompt : prompts) length = std::max(length, static_cast<std::int64_t>(prompt.size()));
  job->new_tokens = new_token_limit(decoder_.architecture(), options, length);
  job->capacity = length + job->new_tokens;
  return job;
}

Result<Generated> BatchScheduler::generate(const std::vector<std::vector<std::int64_t>>& prompts,
                                           const SamplingOptions& options, const StepCallback& on_step,
                                           PassHooks* passes, SchedulerCaller caller) {
  auto job = generation_job(prompts, options, std::move(caller));
  if (job->new_tokens <= 0) return std::move(GenerationRows(decoder_.architecture(), options, prompts.size()).result());
  job->prompts = &prompts;
  job->options = &options;
  job->on_step = &on_step;
  job->passes = passes;
  if (Status s = enqueue(job); !s) return s;
  wait_for(*job);
  if (!job->status) return job->status;
  return std::move(job->generation->result());
}

Result<Generated> BatchScheduler::generate_alone(const std::vector<std::vector<std::int64_t>>& prompts,
                                                 const SamplingOptions& options, const StepCallback& on_step,
                                                 PassHooks* passes, SchedulerCaller caller) {
  auto job = generation_job(prompts, options, std::move(caller));
  if (job->new_tokens <= 0) return std::move(GenerationRows(decoder_.architecture(), options, prompts.size()).result());
  Result<Generated> generated = Status(ErrorCode::internal, "model.generate: not run");
  job->work = [&](KvCache* cache) {
    return guarded("model.generate", [&]() -> Result<json> {
      generated = modeld::generate(decoder_, prompts, options, on_step, passes, cache, &graphs_);
      graph_captures_ = graphs_.captures(), graph_reuses_ = graphs_.reuses();
      return json();
    });
  };
  if (Status s = enqueue(job); !s) return s;
  wait_for(*job);
  if (!job->status) return job->status;
  if (!job->result) return job->result.status();
  return generated;
}

Result<json> BatchScheduler::run_alone(std::function<Result<json>()> work, SchedulerCaller caller) {
  auto job = std::make_shared<Job>();
  job->work = [work = std::move(work)](KvCache*) { return work(); };
  job->caller = std::move(caller);
  if (Status s = enqueue(job); !s) return s;
  wait_for(*job);
  if (!job->status) return job->status;
  return std::move(job->result);
}

Status BatchScheduler::enqueue(const std::shared_ptr<Job>& job) {
  std::int64_t blocks = job->capacity > 0 ? KvPool::blocks_for(job->rows, job->capacity) : 0;
  {
    MutexLock lock(mutex_);
    job->id = next_id_++;
    switch (admission_.offer(job->id, job->work ? 0 : job->rows, blocks)) {
      case Admission::Offer::too_large:
        return Status(ErrorCode::invalid_request,
                      fmt::format("the request needs {} KV cache positions ({} rows × ({} prompt + {} new tokens)), "
                                  "more than model \"{}\"'s whole KV cache of {} positions (model_host kv_cache_mb)",
                                  job->rows * job->capacity, job->rows, job->capacity - job->new_tokens,
                                  job->new_tokens, model_name_, pool_->blocks() * KvPool::kBlockTokens));
      case Admission::Offer::queue_full:
        return {ErrorCode::unavailable,
                fmt::format("model \"{}\" is busy: its request queue is full ({} requests waiting, max_queue {}); "
                            "try again later",
                            model_name_, admission_.queue_depth(), limits_.max_queue)};
      case Admission::Offer::queued:
        waiting_[job->id] = job;
        break;
    }
  }
  wake_.notify_all();
  return Status::ok();
}

void BatchScheduler::wait_for(Job& job) {
  MutexLock lock(mutex_);
  while (!job.done) {
    wake_.wait_for(lock, std::chrono::milliseconds(50));
    if (job.done || !job.caller.gone || !job.caller.gone()) continue;
    if (!admission_.withdraw(job.id)) continue;  // running: its steps notice the caller is gone
    waiting_.erase(job.id);
    job.done = true;
    job.status = Status(ErrorCode::cancelled, "the caller went away while the request waited");
  }
}

void BatchScheduler::loop() {
  while (true) {
    {
      MutexLock lock(mutex_);
      while (!stopping_ && waiting_.empty() && running_.empty()) wake_.wait(lock);
      if (stopping_ && running_.empty()) {
        for (const auto& [id, job] : waiting_) {
          admission_.withdraw(id);
          job->done = true, job->status = Status(ErrorCode::unavailable, "modeld is stopping");
        }
        waiting_.clear();
        wake_.notify_all();
        return;
      }
    }
    // Interleaved prefill: with a batch running, a bounded number of prompt tokens between two steps.
    std::int64_t budget = running_.empty() ? INT64_MAX : kPrefillTokensBetweenSteps;
    std::vector<std::shared_ptr<Job>> prefilled;
    while (budget > 0) {
      std::int64_t tokens = start_next(prefilled);
      if (tokens < 0) break;
      budget -= std::max<std::int64_t>(tokens, 1);
    }
    if (!prefilled.empty()) {
      std::vector<std::pair<std::shared_ptr<Job>, at::Tensor>> first_tokens;
      for (const auto& job : prefilled) first_tokens.emplace_back(job, std::move(job->prompt_logits));
      running_.insert(running_.end(), prefilled.begin(), prefilled.end());
      take_tokens(first_tokens, false);
    }
    if (!running_.empty()) decode_step();
  }
}

std::int64_t BatchScheduler::start_next(std::vector<std::shared_ptr<Job>>& prefilled) {
  std::shared_ptr<Job> job;
  {
    MutexLock lock(mutex_);
    auto started = admission_.start_head();
    if (!started) return -1;
    auto waiting = waiting_.find(started->id);
    job = waiting->second;
    waiting_.erase(waiting);
    job->started = true;
    if (job->capacity > 0) job->cache = pool_->cache_at(started->first_block, job->rows, job->capacity);
  }
  if (job->work) {
    job->result = job->work(job->capacity > 0 ? &job->cache : nullptr);
    finish(*job, Status::ok());
    return 1;
  }
  if (prefill(*job)) prefilled.push_back(job);
  return job->rows * (job->capacity - job->new_tokens);
}

void BatchScheduler::take_tokens(const std::vector<std::pair<std::shared_ptr<Job>, at::Tensor>>& logits_of,
                                 bool ahead) {
  c10::InferenceMode inference;
  std::vector<std::pair<std::shared_ptr<Job>, at::Tensor>> picked_from;  // the jobs whose picking went well
  for (const auto& job_logits : logits_of) {
    const std::shared_ptr<Job>& job = job_logits.first;  // named, not bound: lambdas capture it (clang < 16)
    const at::Tensor& logits = job_logits.second;
    at::Tensor picks;
    auto picked = guarded("model.generate", [&]() -> Result<json> {
      picks = pick_tokens(logits.select(1, 0).to(at::kFloat), *job->options, *job->generator);
      return json();
    });
    if (picked) picked_from.emplace_back(job, std::move(picks));
    else finish(*job, picked.status());
  }
  if (picked_from.empty()) return;
  auto copied = guarded("model.generate", [&]() -> Result<json> {
    std::vector<at::Tensor> picks;
    for (const auto& [job, pick] : picked_from) picks.push_back(pick);
    host_tokens_.start(picks.size() == 1 ? picks[0] : at::cat(picks));
    return json();
  });
  if (!copied) {
    for (const auto& [job, pick] : picked_from) finish(*job, copied.status());
    return;
  }
  // Ahead: every running job is here and continues past this step, unless its
  // tokens end it; those are fed their own tokens (a finished row's output is never read).
  std::vector<std::shared_ptr<Job>> fed;
  if (ahead) {
    for (const auto& [job, pick] : picked_from) {
      if (job->step + 1 >= job->new_tokens) continue;  // its last token: nothing follows
      job->feed = pick.clamp_min(0);
      fed.push_back(job);
    }
    if (!fed.empty()) ahead_ = launch_step(fed);
  }
  const at::Tensor& host = host_tokens_.wait();
  std::int64_t first_row = 0;
  for (const auto& job_pick : picked_from) {
    const std::shared_ptr<Job>& job = job_pick.first;  // named, not bound: lambdas capture it (clang < 16)
    at::Tensor rows = host.narrow(0, first_row, job->rows);
    first_row += job->rows;
    bool queued = ahead_ && std::any_of(ahead_->members.begin(), ahead_->members.end(),
                                        [&](const auto& member) { return member.first == job; });
    auto taken = guarded("model.generate", [&]() -> Result<json> {
      if (job->passes && job->step > 0) {
        if (Status s = job->passes->end(job->step); !s) return s;
      }
      take(*job, rows, queued);
      return json();
    });
    if (!taken) finish(*job, taken.status());
  }
  auto running = [this](const auto& member) { return is_running(*member.first); };
  if (ahead_ && std::none_of(ahead_->members.begin(), ahead_->members.end(), running)) ahead_.reset();
}

bool BatchScheduler::is_running(const Job& job) const {
  return std::any_of(running_.begin(), running_.end(), [&](const auto& running) { return running.get() == &job; });
}

bool BatchScheduler::take(Job& job, const at::Tensor& host, bool fed) {
  std::size_t before = 0, after = 0;
  for (const auto& row : job.generation->result().tokens) before += row.size();
  auto going = job.generation->take(job.step, host, *job.on_step);
  for (const auto& row : job.generation->result().tokens) after += row.size();
  count_tokens(static_cast<std::int64_t>(after - before));
  if (!going) {
    finish(job, going.status());
    return false;
  }
  if (!*going || job.generation->all_finished() || job.step + 1 == job.new_tokens) {
    finish(job, Status::ok());
    return false;
  }
  if (!fed) job.feed = job.generation->feed(host, decoder_.device());
  ++job.step;
  return true;
}

bool BatchScheduler::prefill(Job& job) {
  c10::InferenceMode inference;
  auto started = guarded("model.generate", [&]() -> Result<json> {
    const SamplingOptions& options = *job.options;
    job.prompt = left_padded_batch(*job.prompts, decoder_.device());
    job.generation.emplace(decoder_.architecture(), options, job.prompts->size());
    job.generator = sampling_generator(decoder_.device(), options.seed.value_or(at::default_rng_seed_val));
    std::int64_t length = job.prompt.ids.size(1);
    Hooks* hooks = nullptr;
    if (job.passes) {
      auto begun = job.passes->begin(0, length, length);
      if (!begun) return begun.status();
      hooks = *begun;
    }
    at::Tensor logits = decoder_.forward(job.prompt, &job.cache, true, hooks);
    if (job.passes) {
      if (Status s = job.passes->end(0); !s) return s;
    }
    job.positions = job.prompt.positions.narrow(1, length - 1, 1).clone();
    job.key_mask = job.prompt.key_mask;
    job.prompt_logits = logits;
    return json();
  });
  if (!started) {
    finish(job, started.status());
    return false;
  }
  return true;
}

BatchScheduler::Step BatchScheduler::launch_step(const std::vector<std::shared_ptr<Job>>& jobs) {
  c10::InferenceMode inference;
  Step step;
  std::vector<PassSegment> segments;
  std::vector<at::Tensor> ids, positions;
  std::int64_t rows = 0;
  for (const auto& job : jobs) {
    if (job->caller.ready && !job->caller.ready()) continue;  // its reader is behind: it sits out this step
    job->positions = job->positions + 1;
    job->key_mask = at::cat({job->key_mask, at::ones({job->rows, 1}, job->key_mask.options())}, 1);
    KvCache& cache = job->cache;
    Hooks* hooks = nullptr;
    if (job->passes) {
      auto begun = guarded("model.generate", [&]() -> Result<json> {
        auto hooked = job->passes->begin(job->step, 1, cache.length + 1);
        if (!hooked) return hooked.status();
        hooks = *hooked;
        return json();
      });
      if (!begun) {
        finish(*job, begun.status());
        continue;
      }
    }
    step.members.emplace_back(job, rows);
    rows += job->rows;
    segments.push_back({job->rows, &cache, job->key_mask, job->prompt.padded, hooks});
    ids.push_back(job->feed.view({-1, 1}));
    positions.push_back(job->positions);
  }
  if (step.members.empty()) return step;
  {
    MutexLock lock(mutex_);
    peak_batch_rows_ = std::max(peak_batch_rows_, rows);
  }
  auto stepped = guarded("model.generate", [&]() -> Result<json> {
    step.logits = decoder_.forward_batch(at::cat(ids, 0), at::cat(positions, 0), segments);
    return json();
  });
  if (!stepped) step.logits = stepped.status();
  return step;
}

void BatchScheduler::decode_step() {
  Step step = ahead_ ? std::move(*ahead_) : launch_step(std::vector<std::shared_ptr<Job>>(running_));
  ahead_.reset();
  // Members that ended when the step before was read are no longer running: their rows are ignored.
  std::erase_if(step.members, [this](const auto& member) { return !is_running(*member.first); });
  if (step.members.empty()) {  // every reader is behind
    MutexLock lock(mutex_);
    wake_.wait_for(lock, std::chrono::milliseconds(2));
    return;
  }
  if (!step.logits) {
    for (const auto& [job, first_row] : step.members) finish(*job, step.logits.status());
    return;
  }
  std::vector<std::pair<std::shared_ptr<Job>, at::Tensor>> logits_of;
  for (const auto& [job, first_row] : step.members) logits_of.emplace_back(job, step.logits->narrow(0, first_row, job->rows));
  // Queued ahead on a GPU when the step holds every running request and none has interventions
  // (their hooks run on the host between steps).
  bool ahead = decoder_.device().is_cuda() && step.members.size() == running_.size() &&
               std::none_of(step.members.begin(), step.members.end(), [](const auto& member) { return member.first->passes; });
  take_tokens(logits_of, ahead);
}

void BatchScheduler::finish(Job& job, Status status) {
  job.cache = KvCache();
  auto at = std::find_if(running_.begin(), running_.end(), [&](const auto& running) { return running.get() == &job; });
  if (at != running_.end()) running_.erase(at);
  {
    MutexLock lock(mutex_);
    if (job.done) return;
    if (job.started) admission_.release(job.id);
    ++requests_done_;
    job.status = std::move(status);
    job.done = true;
  }
  wake_.notify_all();
}

void BatchScheduler::count_tokens(std::int64_t tokens) {
  double now = steady_seconds();
  MutexLock lock(mutex_);
  recent_tokens_.emplace_back(now, tokens);
  while (!recent_tokens_.empty() && recent_tokens_.front().first < now - kRateWindowSeconds) recent_tokens_.pop_front();
}

json BatchScheduler::kv_cache() const {
  return {{"tokens", pool_->tokens()},
          {"bytes", pool_->bytes()},
          {"bytes_per_token", KvPool::bytes_per_token(decoder_)},
          {"block_tokens", KvPool::kBlockTokens}};
}

json BatchScheduler::stats() const {
  double now = steady_seconds();
  MutexLock lock(mutex_);
  const BlockArena& blocks = admission_.blocks();
  json kv = {{"block_tokens", KvPool::kBlockTokens},
             {"blocks", blocks.blocks()},
             {"blocks_used", blocks.used()},
             {"blocks_free", blocks.blocks() - blocks.used()},
             {"largest_free_run", blocks.largest_free_run()},
             {"bytes", pool_->bytes()}};
  std::int64_t recent = 0;
  for (const auto& [when, tokens] : recent_tokens_) {
    if (when >= now - kRateWindowSeconds) recent += tokens;
  }
  return {{"queue_depth", admission_.queue_depth()},
          {"running", admission_.running()},
          {"batch_rows", admission_.batch_rows()},
          {"peak_batch_rows", peak_batch_rows_},
          {"max_batch", limits_.max_batch},
          {"max_queue", limits_.max_queue},
          {"requests_done", requests_done_},
          {"graphs", {{"captured", graph_captures_.load()}, {"reused", graph_reuses_.load()}}},
          {"tokens_per_second", static_cast<double>(recent) / kRateWindowSeconds},
          {"kv", kv}};
}

}  // namespace gpubox::modeld
