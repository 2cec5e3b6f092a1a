// BatchScheduler: one model's requests, served by one thread. Generate
// requests (dynamic decode steps) join one running batch at step boundaries
// and leave it when they finish, are cancelled or lose their caller; each
// decode step of the batch is one forward pass (Decoder::forward_batch) in
// which every request keeps its own cache, hooks, sampling and stops. All
// else (model.forward, model.run, generate with static steps) runs alone
// between two steps; a static generation takes its cache from the same pool.
// Prefill is interleaved, not chunked: between two decode steps the requests
// waiting start (each prompt in one pass, as it would run
// alone) up to kPrefillTokensBetweenSteps prompt tokens, at least one; their
// first tokens go out together once all of them ran, so that no request of a
// burst waits for the others' prefills between its first and second token.
// Which request starts when: Admission (first come first served within
// max_batch rows and the KV pool's blocks). On a GPU a step's tokens (every
// request's, gathered on the device) reach the host in one asynchronous copy
// to pinned memory, and the next step is queued before the host reads them,
// as generate() does alone: stops and EOS read that copy, and a request that
// ended there leaves the step already queued, its rows ignored. Thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "base/thread_annotations.h"
#include "model/modeld/scheduler/admission.h"
#include "model/modeld/scheduler/generation.h"
#include "model/modeld/scheduler/kv_pool.h"

namespace gpubox::modeld {

// The caller of a request, as the scheduler sees it.
struct SchedulerCaller {
  std::function<bool()> gone;   // it went away: a request still queued is dropped
  // A running generation's reader can take its next step's messages now; a
  // reader that fell behind makes its request sit out steps, never the batch wait. Empty: always.
  std::function<bool()> ready;
};

// The prompt tokens admitted between two decode steps of a running batch
// (a burst of arrivals costs the running requests one pause, not one per arrival).
inline constexpr std::int64_t kPrefillTokensBetweenSteps = 2048;

struct SchedulerLimits {
  std::int64_t max_batch = 32;   // rows decoded together (a request of more rows runs when the batch is empty)
  std::int64_t max_queue = 256;  // requests waiting; beyond, unavailable
};

class BatchScheduler {
 public:
  BatchScheduler(std::string model_name, const Decoder& decoder, std::unique_ptr<KvPool> pool, SchedulerLimits limits);
  ~BatchScheduler();  // waits for the thread; no request may still be waiting (their callers hold the model)
  BatchScheduler(const BatchScheduler&) = delete;
  BatchScheduler& operator=(const BatchScheduler&) = delete;

  // Generates in the running batch, as generate() would alone (the prompts
  // checked by the caller); blocks until the request ends. unavailable when
  // the queue is full, invalid_request when the request needs more cache than
  // the whole pool.
  Result<Generated> generate(const std::vector<std::vector<std::int64_t>>& prompts, const SamplingOptions& options,
                             const StepCallback& on_step, PassHooks* passes, SchedulerCaller caller);
  // Generates alone between two decode steps (static steps: a shape fixed for
  // one request, maybe a CUDA graph), on a zeroed run of the same pool's
  // blocks; admitted, queued and refused as generate() is.
  Result<Generated> generate_alone(const std::vector<std::vector<std::int64_t>>& prompts,
                                   const SamplingOptions& options, const StepCallback& on_step, PassHooks* passes,
                                   SchedulerCaller caller);
  // Runs work on the scheduler's thread between two decode steps; blocks until it ran.
  Result<nlohmann::json> run_alone(std::function<Result<nlohmann::json>()> work, SchedulerCaller caller);

  // {queue_depth, running, batch_rows, peak_batch_rows, max_batch, max_queue, requests_done,
  //  graphs: {captured, reused}, tokens_per_second,
  //  kv: {block_tokens, blocks, blocks_used, blocks_free, largest_free_run, bytes}}
  nlohmann::json stats() const;
  // {tokens, bytes, bytes_per_token, block_tokens}: what the KV pool holds (model.info's kv_cache).
  nlohmann::json kv_cache() const;

 private:
  struct Job;
  // A decode step launched on the device (its logits maybe not computed yet), and its members' first rows.
  struct Step {
    std::vector<std::pair<std::shared_ptr<Job>, std::int64_t>> members;
    Result<at::Tensor> logits = at::Tensor();  // [rows, 1, vocab]
  };
  // The job of a generation of prompts (rows, capacity, new tokens), not yet queued.
  std::shared_ptr<Job> generation_job(const std::vector<std::vector<std::int64_t>>& prompts,
                                      const SamplingOptions& options, SchedulerCaller caller) const;
  // Queues job; a job larger than the pool gets invalid_request with its token counts.
  Status enqueue(const std::shared_ptr<Job>& job);
  void wait_for(Job& job);
  void loop();
  // Starts the head of the queue (a prefill goes into prefilled); the prompt tokens it ran, -1: nothing could start.
  std::int64_t start_next(std::vector<std::shared_ptr<Job>>& prefilled);
  bool prefill(Job& job);  // false when the job already ended
  // Picks each job's tokens from its logits [rows, 1, vocab] on the device, copies them to the host
  // at once, and hands them over; ahead (GPU only): queues the next step before reading them.
  void take_tokens(const std::vector<std::pair<std::shared_ptr<Job>, at::Tensor>>& logits_of, bool ahead);
  // Hands a job its host tokens [rows]; false when it ended (finish() was called). fed: its next step is queued with them.
  bool take(Job& job, const at::Tensor& host, bool fed);
  // Launches one decode step of jobs (their feed set), those whose readers are ready.
  Step launch_step(const std::vector<std::shared_ptr<Job>>& jobs);
  void decode_step();
  void finish(Job& job, Status status);
  bool is_running(const Job& job) const;  // in running_ (a job that ended is not)
  void count_tokens(std::int64_t tokens);

  const std::string model_name_;
  const Decoder& decoder_;
  std::unique_ptr<KvPool> pool_;
  const SchedulerLimits limits_;

  mutable Mutex mutex_;
  std::condition_variable_any wake_;
  bool stopping_ GUARDED_BY(mutex_) = false;
  Admission admission_ GUARDED_BY(mutex_);
  std::uint64_t next_id_ GUARDED_BY(mutex_) = 1;
  std::map<std::uint64_t, std::shared_ptr<Job>> waiting_ GUARDED_BY(mutex_);  // admission_'s queue, by id
  std::int64_t peak_batch_rows_ GUARDED_BY(mutex_) = 0;  // the most rows one decode step took
  std::uint64_t requests_done_ GUARDED_BY(mutex_) = 0;
  std::deque<std::pair<double, std::int64_t>> recent_tokens_ GUARDED_BY(mutex_);  // (seconds, new tokens) of the last 10 s

  std::vector<std::shared_ptr<Job>> running_;  // the scheduler thread's only, as are:
  std::optional<Step> ahead_;                  // the step queued before the last one's tokens were read
  HostTokens host_tokens_;
  StepGraphs graphs_;                          // static generations' CUDA graphs (before pool_ goes)
  std::atomic<std::uint64_t> graph_captures_{0}, graph_reuses_{0};  // graphs_'s counts, for stats()
  std::thread thread_;
};

}  // namespace gpubox::modeld
