#include "model/modeld/batch_scheduler.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <algorithm>
#include <chrono>
#include <fmt/format.h>
#include <optional>

#include "model/modeld/method_guard.h"

namespace gpubox::modeld {

using nlohmann::json;

struct BatchScheduler::Job {
  // A job that runs alone; empty for a generation.
  std::function<Result<json>()> work;
  // A generation: what the caller gave (alive until it returns).
  const std::vector<std::vector<std::int64_t>>* prompts = nullptr;
  const SamplingOptions* options = nullptr;
  const StepCallback* on_step = nullptr;
  PassHooks* passes = nullptr;
  SchedulerCaller caller;
  std::int64_t rows = 0, capacity = 0, new_tokens = 0;
  // Its state, on the scheduler's thread while it runs.
  std::optional<KvPool::Lease> lease;
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
    : model_name_(std::move(model_name)), decoder_(decoder), pool_(std::move(pool)), limits_(limits) {
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

Result<Generated> BatchScheduler::generate(const std::vector<std::vector<std::int64_t>>& prompts,
                                           const SamplingOptions& options, const StepCallback& on_step,
                                           PassHooks* passes, SchedulerCaller caller) {
  auto job = std::make_shared<Job>();
  job->prompts = &prompts;
  job->options = &options;
  job->on_step = &on_step;
  job->passes = passes;
  job->caller = std::move(caller);
  job->rows = static_cast<std::int64_t>(prompts.size());
  std::int64_t length = 0;
  for (const auto& prompt : prompts) length = std::max(length, static_cast<std::int64_t>(prompt.size()));
  job->new_tokens = new_token_limit(decoder_.architecture(), options, length);
  if (job->new_tokens <= 0) return std::move(GenerationRows(decoder_.architecture(), options, prompts.size()).result());
  job->capacity = length + job->new_tokens;
  std::int64_t positions = job->rows * job->capacity;
  std::int64_t pool_positions = pool_->blocks() * KvPool::kBlockTokens;
  if (KvPool::blocks_for(job->rows, job->capacity) > pool_->blocks()) {
    return Status(ErrorCode::invalid_request,
                  fmt::format("the request needs {} KV cache positions ({} rows × ({} prompt + {} new tokens)), more "
                              "than model \"{}\"'s whole KV cache of {} positions (model_host kv_cache_mb)",
                              positions, job->rows, length, job->new_tokens, model_name_, pool_positions));
  }
  if (Status s = enqueue(job); !s) return s;
  wait_for(*job);
  if (!job->status) return job->status;
  return std::move(job->generation->result());
}

Result<json> BatchScheduler::run_alone(std::function<Result<json>()> work, SchedulerCaller caller) {
  auto job = std::make_shared<Job>();
  job->work = std::move(work);
  job->caller = std::move(caller);
  if (Status s = enqueue(job); !s) return s;
  wait_for(*job);
  if (!job->status) return job->status;
  return std::move(job->result);
}

Status BatchScheduler::enqueue(const std::shared_ptr<Job>& job) {
  {
    MutexLock lock(mutex_);
    if (static_cast<std::int64_t>(queue_.size()) >= limits_.max_queue) {
      return {ErrorCode::unavailable,
              fmt::format("model \"{}\" is busy: its request queue is full ({} requests waiting, max_queue {}); "
                          "try again later",
                          model_name_, queue_.size(), limits_.max_queue)};
    }
    queue_.push_back(job);
  }
  wake_.notify_all();
  return Status::ok();
}

void BatchScheduler::wait_for(Job& job) {
  MutexLock lock(mutex_);
  while (!job.done) {
    wake_.wait_for(lock, std::chrono::milliseconds(50));
    if (job.done || !job.caller.gone || !job.caller.gone()) continue;
    auto waiting = std::find_if(queue_.begin(), queue_.end(), [&](const auto& queued) { return queued.get() == &job; });
    if (waiting == queue_.end()) continue;  // running: its steps notice the caller is gone
    queue_.erase(waiting);
    job.done = true;
    job.status = Status(ErrorCode::cancelled, "the caller went away while the request waited");
  }
}

void BatchScheduler::loop() {
  while (true) {
    {
      MutexLock lock(mutex_);
      while (!stopping_ && queue_.empty() && running_.empty()) wake_.wait(lock);
      if (stopping_ && running_.empty()) {
        for (const auto& job : queue_) job->done = true, job->status = Status(ErrorCode::unavailable, "modeld is stopping");
        queue_.clear();
        wake_.notify_all();
        return;
      }
    }
    // Interleaved prefill: with a batch running, one admission between two steps.
    std::int64_t admissions = running_.empty() ? INT64_MAX : 1;
    while (admissions > 0) {
      std::shared_ptr<Job> job;
      {
        MutexLock lock(mutex_);
        if (queue_.empty()) break;
        job = queue_.front();
      }
      if (!admit(job)) break;
      --admissions;
    }
    if (!running_.empty()) decode_step();
  }
}

bool BatchScheduler::admit(const std::shared_ptr<Job>& job) {
  if (!job->work) {
    {
      MutexLock lock(mutex_);
      if (!running_.empty() && batch_rows_ + job->rows > limits_.max_batch) return false;
    }
    auto lease = pool_->take(job->rows, job->capacity);
    if (!lease) return false;
    job->lease.emplace(std::move(*lease));
  }
  {
    MutexLock lock(mutex_);
    auto at = std::find(queue_.begin(), queue_.end(), job);
    if (at == queue_.end()) {  // its caller left meanwhile
      job->lease.reset();
      return true;
    }
    queue_.erase(at);
  }
  if (job->work) {
    job->result = job->work();
    finish(*job, Status::ok());
    return true;
  }
  if (start_generation(*job)) {
    running_.push_back(job);
    MutexLock lock(mutex_);
    ++running_count_;
    batch_rows_ += job->rows;
  }
  return true;
}

// Picks a running job's tokens from logits [rows, 1, vocab], hands them over,
// and says whether it goes on (false: it ended, finish() was called).
bool BatchScheduler::take_step(Job& job, const at::Tensor& logits) {
  at::Tensor picked = pick_tokens(logits.select(1, 0).to(at::kFloat), *job.options, *job.generator).to(at::kCPU);
  std::size_t before = 0, after = 0;
  for (const auto& row : job.generation->result().tokens) before += row.size();
  auto going = job.generation->take(job.step, picked, *job.on_step);
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
  job.feed = job.generation->feed(picked, decoder_.device());
  ++job.step;
  return true;
}

bool BatchScheduler::start_generation(Job& job) {
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
    at::Tensor logits = decoder_.forward(job.prompt, &job.lease->cache(), true, hooks);
    if (job.passes) {
      if (Status s = job.passes->end(0); !s) return s;
    }
    job.positions = job.prompt.positions.narrow(1, length - 1, 1).clone();
    job.key_mask = job.prompt.key_mask;
    return json(take_step(job, logits));
  });
  if (!started) {
    finish(job, started.status());
    return false;
  }
  return started->get<bool>();
}

void BatchScheduler::decode_step() {
  c10::InferenceMode inference;
  std::vector<std::shared_ptr<Job>> members;
  std::vector<PassSegment> segments;
  std::vector<at::Tensor> ids, positions;
  for (const auto& job : std::vector<std::shared_ptr<Job>>(running_)) {
    if (job->caller.ready && !job->caller.ready()) continue;  // its reader is behind: it sits out this step
    job->positions = job->positions + 1;
    job->key_mask = at::cat({job->key_mask, at::ones({job->rows, 1}, job->key_mask.options())}, 1);
    KvCache& cache = job->lease->cache();
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
    members.push_back(job);
    segments.push_back({job->rows, &cache, job->key_mask, job->prompt.padded, hooks});
    ids.push_back(job->feed.view({-1, 1}));
    positions.push_back(job->positions);
  }
  if (members.empty()) {  // every reader is behind
    MutexLock lock(mutex_);
    wake_.wait_for(lock, std::chrono::milliseconds(2));
    return;
  }
  {
    MutexLock lock(mutex_);
    std::int64_t rows = 0;
    for (const auto& segment : segments) rows += segment.rows;
    peak_batch_rows_ = std::max(peak_batch_rows_, rows);
  }
  at::Tensor logits;
  auto stepped = guarded("model.generate", [&]() -> Result<json> {
    logits = decoder_.forward_batch(at::cat(ids, 0), at::cat(positions, 0), segments);
    return json();
  });
  if (!stepped) {
    for (const auto& job : members) finish(*job, stepped.status());
    return;
  }
  std::int64_t first_row = 0;
  for (const auto& job : members) {
    at::Tensor rows = logits.narrow(0, first_row, job->rows);
    first_row += job->rows;
    auto taken = guarded("model.generate", [&]() -> Result<json> {
      if (job->passes) {
        if (Status s = job->passes->end(job->step); !s) return s;
      }
      take_step(*job, rows);
      return json();
    });
    if (!taken) finish(*job, taken.status());
  }
}

void BatchScheduler::finish(Job& job, Status status) {
  job.lease.reset();
  auto at = std::find_if(running_.begin(), running_.end(), [&](const auto& running) { return running.get() == &job; });
  bool was_running = at != running_.end();
  if (was_running) running_.erase(at);
  {
    MutexLock lock(mutex_);
    if (job.done) return;
    if (was_running) --running_count_, batch_rows_ -= job.rows;
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

json BatchScheduler::stats() const {
  json kv = pool_->stats();
  double now = steady_seconds();
  MutexLock lock(mutex_);
  std::int64_t recent = 0;
  for (const auto& [when, tokens] : recent_tokens_) {
    if (when >= now - kRateWindowSeconds) recent += tokens;
  }
  return {{"queue_depth", queue_.size()},
          {"running", running_count_},
          {"batch_rows", batch_rows_},
          {"peak_batch_rows", peak_batch_rows_},
          {"max_batch", limits_.max_batch},
          {"max_queue", limits_.max_queue},
          {"requests_done", requests_done_},
          {"tokens_per_second", static_cast<double>(recent) / kRateWindowSeconds},
          {"kv", kv}};
}

}  // namespace gpubox::modeld
