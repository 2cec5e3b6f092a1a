// Decoder: one loaded model (its weights bound to tensors) and its forward
// pass — the one decoder every architecture is, its choices read from the
// Architecture. Named hook points sit on the forward path; with no Hooks the
// path checks one null pointer per point and nothing else. Immutable after
// load: forward() may run on several threads at once (each with its own
// KvCache).
#pragma once

#include <ATen/core/Tensor.h>
#include <atomic>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/modeld/decoder/architecture.h"
#include "model/modeld/decoder/hook_points.h"
#include "model/weights/checkpoint.h"
#include "base/status.h"

namespace gpubox::modeld {

// The profiler scope around each block of the forward pass (decode_profile counts the ops inside it).
inline constexpr const char* kLayerScope = "gpubox::decoder_layer";

// Interventions at hook points (the interventions issue builds them); layer is -1 outside blocks.
class Hooks {
 public:
  virtual ~Hooks() = default;
  virtual bool wants(HookPoint point, int layer) const = 0;
  // May read value (capture) or replace it (steer, ablate, patch).
  virtual void apply(HookPoint point, int layer, at::Tensor& value) = 0;
};

// Keys and values of earlier positions, one pair per layer: [batch, kv_heads, capacity, head_dim].
struct KvCache {
  std::vector<at::Tensor> keys;
  std::vector<at::Tensor> values;
  std::int64_t length = 0;    // slots filled
  std::int64_t capacity = 0;
  // A split model's: one cache per rank, of its KV heads on its device (keys
  // and values above are then empty; length and capacity are the ranks').
  std::vector<KvCache> shards;
  void zero();  // every slot of every layer (and shard) to 0
};

struct ForwardInput {
  at::Tensor ids;        // [batch, tokens] int64
  at::Tensor positions;  // [batch, tokens] int64 (left padding: a row's first real token is 0)
  at::Tensor key_mask;   // [batch, cache length + tokens] bool: false where a slot is padding
  bool padded = true;    // false: key_mask is all true (attention then needs no mask but causality)
  // A static step (what a CUDA graph captures: no shape or host value changes
  // between steps): one token per row, written to the cache at this slot
  // ([1] int64, on the device) and attending over the cache's whole capacity;
  // key_mask is then [batch, capacity], true where a slot holds a real token
  // (the cache must start zeroed: new_cache(..., zeroed)). cache->length is not advanced.
  at::Tensor cache_slot;
};

// One request's rows in a batched decode pass (Decoder::forward_batch).
struct PassSegment {
  std::int64_t rows = 0;    // its consecutive rows of the pass
  KvCache* cache = nullptr;
  at::Tensor key_mask;      // [rows, cache length + 1] bool, as ForwardInput's
  bool padded = true;       // as ForwardInput's
  Hooks* hooks = nullptr;   // this request's: they see its rows only, shaped as in its pass alone
};

// The kinds of pass whose attention kernel model.stats names.
enum class PassKind {
  prefill,       // prompt tokens
  decode,        // one token per row, attending over the filled cache
  fixed_decode,  // a static step: one token per row over the whole cache, masked (what a CUDA graph replays)
};

// Loading progress, read by modeld.status while another thread loads.
struct LoadProgress {
  std::atomic<std::uint64_t> bytes_loaded{0};
  std::atomic<std::uint64_t> bytes_total{0};
  std::atomic<std::uint64_t> tensors_loaded{0};
  std::atomic<std::uint64_t> tensors_total{0};
};

class Decoder {
 public:
  // Binds every tensor the architecture expects, checking names and shapes
  // (an error names the tensor and its file); tensors of the file's dtype on
  // the CPU are used in place (views of the mapped file), others are cast or
  // copied. The checkpoint must outlive the decoder.
  static Result<std::unique_ptr<Decoder>> load(const Architecture& architecture, const weights::Checkpoint& checkpoint,
                                               c10::ScalarType dtype, c10::Device device, LoadProgress& progress);
  // The model split over devices (tensor parallel: one rank per device, all
  // CPUs or all distinct GPUs), each rank binding only its slices
  // (weight_loader.h's Shard). Callers see one model: forward() and
  // forward_batch() take inputs on device() and return logits there. One pass
  // runs at a time. A head count, KV-group count or MLP width the ranks do
  // not divide is an invalid_request naming the numbers and the splits that work.
  static Result<std::unique_ptr<Decoder>> load(const Architecture& architecture, const weights::Checkpoint& checkpoint,
                                               c10::ScalarType dtype, const std::vector<c10::Device>& devices,
                                               LoadProgress& progress);
  ~Decoder();
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;

  // Logits [batch, tokens (1 when last_only), vocab] in the model dtype. With a
  // cache, keys and values of these tokens are appended to it.
  // with_grad: autograd records the pass (for capture_grad; the embeddings are where it starts).
  at::Tensor forward(const ForwardInput& input, KvCache* cache, bool last_only, Hooks* hooks = nullptr,
                     bool with_grad = false) const;
  // One decode step of several requests at once: ids and positions [sum of
  // their rows, 1], the segments' rows one after another; last-position logits
  // [rows, 1, vocab]. A segment's rows get the logits forward() gives that
  // request alone: attention runs per segment, and a float32 decode row's
  // products do not depend on the batch's size.
  at::Tensor forward_batch(const at::Tensor& ids, const at::Tensor& positions, const std::vector<PassSegment>& segments) const;
  // zeroed: slots not yet written hold 0 (a static step reads them, masked; never NaN).
  KvCache new_cache(std::int64_t batch, std::int64_t capacity, bool zeroed = false) const;

  const Architecture& architecture() const;  // the whole model's
  c10::ScalarType dtype() const;
  c10::Device device() const;                      // rank 0's
  std::vector<c10::Device> devices() const;        // one per rank
  std::uint64_t weight_bytes() const;             // as held (after casts), every rank's
  std::vector<std::uint64_t> rank_weight_bytes() const;  // each rank's
  std::uint64_t parameter_count() const;          // elements of the weights, norms and biases included
  const std::vector<std::string>& unexpected_tensors() const;  // in the files, unused
  // The SDPA kernel PyTorch picked for this model's first pass of a kind:
  // "math", "flash_attention", "efficient_attention"…; "none" before such a pass ran.
  std::string attention_backend(PassKind kind) const;
  // Why a split model is down (a rank failed: named, with its device and
  // error; every pass then throws RankFailure); "" while it is not.
  std::string failure() const;

 private:
  struct Weights;
  struct Split;
  explicit Decoder(std::vector<std::unique_ptr<Weights>> ranks);
  at::Tensor run_pass(const at::Tensor& ids, const at::Tensor& positions, const std::vector<PassSegment>& segments,
                      const at::Tensor& cache_slot, bool last_only, bool with_grad) const;
  // One rank's pass over its weights (the whole pass when the model is not split).
  static at::Tensor rank_pass(const Weights& w, const at::Tensor& ids, const at::Tensor& positions,
                              const std::vector<PassSegment>& segments, const at::Tensor& cache_slot, bool last_only,
                              bool with_grad);
  at::Tensor split_pass(const at::Tensor& ids, const at::Tensor& positions, const std::vector<PassSegment>& segments,
                        const at::Tensor& cache_slot, bool last_only, bool with_grad) const;
  std::vector<std::unique_ptr<Weights>> ranks_;  // one per rank; a model on one device has one
  std::unique_ptr<Split> split_;                 // the ranks' threads and collectives when there are several
  Architecture whole_;                           // the model's (a rank's Weights hold its part's)
};

}  // namespace gpubox::modeld
