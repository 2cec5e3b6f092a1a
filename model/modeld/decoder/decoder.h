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

  const Architecture& architecture() const;
  c10::ScalarType dtype() const;
  c10::Device device() const;
  std::uint64_t weight_bytes() const;             // as held (after casts)
  std::uint64_t parameter_count() const;          // elements of the weights, norms and biases included
  const std::vector<std::string>& unexpected_tensors() const;  // in the files, unused
  // The SDPA kernel PyTorch picked for this model's first pass of a kind:
  // "math", "flash_attention", "efficient_attention"…; "none" before such a pass ran.
  std::string attention_backend(PassKind kind) const;

 private:
  struct Weights;
  explicit Decoder(std::unique_ptr<Weights> weights);
  at::Tensor run_pass(const at::Tensor& ids, const at::Tensor& positions, const std::vector<PassSegment>& segments,
                      const at::Tensor& cache_slot, bool last_only, bool with_grad) const;
  std::unique_ptr<Weights> weights_;
};

}  // namespace gpubox::modeld
