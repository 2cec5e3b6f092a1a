// Over 600 lines: the one forward pass every architecture is (embeddings, attention with its masks and batch parts, MLP, norms), whose pieces share the bound weights and the pass's hooks, and how the ranks of a split model run it together.
#include "model/modeld/decoder/decoder.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <functional>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <limits>
#include <numbers>
#include <numeric>
#include <tuple>
#include <utility>

#include "base/thread_annotations.h"
#include "model/modeld/decoder/cpu_linear.h"
#include "model/modeld/decoder/grouped_attention.h"
#include "model/modeld/decoder/head_results.h"
#include "model/modeld/decoder/rank_hooks.h"
#include "model/modeld/decoder/weight_loader.h"
#include "model/modeld/gpu/gpu_exclusion.h"
#include "model/modeld/split/rank_exchange.h"
#include "model/modeld/split/rank_group.h"
#include "model/modeld/split/rank_workers.h"

namespace gpubox::modeld {
namespace {

using at::Tensor;

// x [.., in] times w (a Linear's [out, in] or a Conv1D's [in, out], by
// layout) plus b, by CpuLinear where it applies (a few rows of float32 or
// bfloat16 on a CPU with AVX-512 or AVX2, no gradient wanted; cpu_linear.h), else
// undefined. GPUBOX_MODELD_LIBTORCH_LINEAR=1 leaves every product to LibTorch.
// A float32 decode pass ([.., 1, in]) of more rows than CpuLinear takes at once
// runs in chunks of its rows, so that a row's product is the one it gets in a
// smaller batch: what a request decodes beside others is what it decodes alone.
Tensor native_linear(const Tensor& x, const Tensor& w, const Tensor& b, WeightLayout layout, const Tensor& residual = {}) {
  static const bool enabled = [] {
    const char* libtorch = std::getenv("GPUBOX_MODELD_LIBTORCH_LINEAR");
    return cpu_linear_available() && !(libtorch && std::strcmp(libtorch, "1") == 0);
  }();
  if (!enabled || !x.device().is_cpu() || w.dim() != 2 || !w.is_contiguous()) return {};
  c10::ScalarType type = x.scalar_type();
  if ((type != at::kFloat && type != at::kBFloat16) || w.scalar_type() != type) return {};
  if (b.defined() && (b.scalar_type() != type || !b.is_contiguous())) return {};
  auto element = type == at::kFloat ? LinearElement::float32 : LinearElement::bfloat16;
  bool out_in = layout == WeightLayout::out_in;
  std::int64_t in = w.size(out_in ? 1 : 0), out = w.size(out_in ? 0 : 1);
  std::int64_t rows = in > 0 ? x.numel() / in : 0;
  bool decode_rows = element == LinearElement::float32 && x.dim() >= 2 && x.size(-2) == 1 && rows > kCpuLinearMaxRows;
  if ((!decode_rows && !cpu_linear_worth_it(element, rows)) || x.size(-1) != in) return {};
  bool grad = x.requires_grad() || w.requires_grad() || (b.defined() && b.requires_grad()) ||
              (residual.defined() && residual.requires_grad());
  if (grad && at::GradMode::is_enabled()) return {};
  auto shape = x.sizes().vec();
  shape.back() = out;
  if (residual.defined() &&
      (residual.scalar_type() != type || !residual.is_contiguous() || residual.sizes() != at::IntArrayRef(shape))) {
    return {};
  }
  Tensor input = x.contiguous();
  Tensor y = at::empty(shape, x.options());
  const void* bias = b.defined() ? b.data_ptr() : nullptr;
  const void* added = residual.defined() ? residual.data_ptr() : nullptr;
  for (std::int64_t first = 0; first < rows; first += kCpuLinearMaxRows) {
    std::int64_t chunk = std::min(kCpuLinearMaxRows, rows - first);
    auto at_row = [&](const void* base, std::int64_t width) {
      return base ? static_cast<const char*>(base) + first * width * static_cast<std::int64_t>(x.element_size()) : nullptr;
    };
    cpu_linear({element, at_row(input.data_ptr(), in), layout, w.data_ptr(), bias,
                const_cast<char*>(at_row(y.data_ptr(), out)), chunk, in, out, at_row(added, out)});
  }
  return y;
}

// x rotated by RoPE: x cos + rotate_half(x) sin, where rotate_half(x) sin =
// roll(x, d/2) signed_sin, signed_sin being sin with its first half negated.
// Three ops (q and k together in one pass when nothing hooks between them).
Tensor rotate(const Tensor& x, const Tensor& cos, const Tensor& signed_sin) {
  return at::addcmul(x * cos, at::roll(x, x.size(-1) / 2, -1), signed_sin);
}

// SDPA's kernel names, by at::_fused_sdp_choice's number (sdp::SDPBackend).
const char* sdpa_backend_name(std::int64_t choice) {
  switch (choice) {
    case 0: return "math";
    case 1: return "flash_attention";
    case 2: return "efficient_attention";
    case 3: return "cudnn_attention";
    case 4: return "overrideable";
    default: return "none";
  }
}

// RoPE inverse frequencies in fp32, with Llama 3's or linear scaling applied as transformers does.
Tensor inverse_frequencies(const RopeConfig& rope, std::int64_t dim) {
  Tensor exponents = at::arange(0, dim, 2, at::kLong).to(at::kFloat) / static_cast<double>(dim);
  Tensor inv = 1.0 / at::pow(rope.theta, exponents);
  if (rope.kind == RopeKind::linear) return inv / rope.factor;
  if (rope.kind != RopeKind::llama3) return inv;
  double original = static_cast<double>(rope.original_max_positions);
  double low_wavelen = original / rope.low_freq_factor;
  double high_wavelen = original / rope.high_freq_factor;
  Tensor wavelen = 2 * std::numbers::pi / inv;
  Tensor scaled = at::where(wavelen > low_wavelen, inv / rope.factor, inv);
  Tensor smooth = (original / wavelen - rope.low_freq_factor) / (rope.high_freq_factor - rope.low_freq_factor);
  Tensor smoothed = (1 - smooth) * scaled / rope.factor + smooth * scaled;
  Tensor medium = at::logical_not(wavelen < high_wavelen).logical_and(at::logical_not(wavelen > low_wavelen));
  return at::where(medium, smoothed, scaled);
}

constexpr std::int64_t kBackendUnknown = -2;

enum class MaskNeed {
  none,    // every query sees every key: a decode step without padding, inside the window
  causal,  // plain causal: a pass from an empty cache without padding, inside the window
  mask,    // anything else: the explicit boolean mask
};

// The attention masks of one forward pass: whether a layer needs one (SDPA
// picks its fastest kernel only without one), and each mask built on first
// use, once per pass (one for full attention, one per sliding window).
class PassMasks {
 public:
  using Build = std::function<Tensor(std::optional<std::int64_t> window)>;
  // fixed: a static step, which always has its mask (its keys are the whole cache).
  PassMasks(bool padded, bool fixed, std::int64_t start, std::int64_t tokens, Build build)
      : padded_(padded), fixed_(fixed), start_(start), tokens_(tokens), build_(std::move(build)) {}

  MaskNeed need(std::optional<std::int64_t> window) const {
    if (padded_ || fixed_) return MaskNeed::mask;
    std::int64_t keys = start_ + tokens_;
    bool inside_window = !window || keys <= *window;
    if (tokens_ == 1 && inside_window) return MaskNeed::none;
    if (start_ == 0 && inside_window) return MaskNeed::causal;
    return MaskNeed::mask;
  }

  const Tensor& get(std::optional<std::int64_t> window) {
    for (const auto& [built_window, mask] : built_) {
      if (built_window == window) return mask;
    }
    built_.emplace_back(window, build_(window));
    return built_.back().second;
  }

 private:
  bool padded_, fixed_;
  std::int64_t start_, tokens_;
  Build build_;
  std::vector<std::pair<std::optional<std::int64_t>, Tensor>> built_;
};

// One request's rows during a pass: where they sit in the batch, its cache,
// hooks and masks. Attention runs part by part; a lone part is every row.
struct PassPart {
  std::int64_t first_row = 0, rows = 0;
  KvCache* cache = nullptr;
  Hooks* hooks = nullptr;
  PassMasks masks;
};

// The Hooks of a pass of several parts: each part's hooks see its own rows
// only, shaped as in that request's pass alone; what they replace goes back at those rows.
class PartHooks final : public Hooks {
 public:
  explicit PartHooks(const std::vector<PassPart>& parts) : parts_(parts) {}
  bool wants(HookPoint point, int layer) const override {
    return std::any_of(parts_.begin(), parts_.end(),
                       [&](const PassPart& part) { return part.hooks && part.hooks->wants(point, layer); });
  }
  void apply(HookPoint point, int layer, Tensor& value) override {
    std::vector<Tensor> pieces;
    bool replaced = false;
    for (const auto& part : parts_) {
      Tensor piece = value.narrow(0, part.first_row, part.rows);
      if (part.hooks && part.hooks->wants(point, layer)) {
        Tensor before = piece;
        part.hooks->apply(point, layer, piece);
        replaced = replaced || !piece.is_same(before);
      }
      pieces.push_back(piece);
    }
    if (replaced) value = at::cat(pieces, 0);
  }

 private:
  const std::vector<PassPart>& parts_;
};

}  // namespace

// The bound weights and what the forward pass derives from them once.
struct Decoder::Weights : BoundWeights {
  Architecture arch;      // of this rank's part (heads, KV heads, inner units, vocabulary)
  c10::ScalarType dtype = at::kFloat;
  c10::Device device = c10::Device(c10::kCPU);
  // A rank of a split model: which, where its vocabulary starts, how it reaches the others.
  struct Rank {
    int index = 0;
    std::int64_t vocab_start = 0;
    RankExchange* exchange = nullptr;
    RankCollectives* collectives = nullptr;
  };
  std::optional<Rank> rank;  // none: the whole model
  Tensor inv_freq;        // fp32 on device
  Tensor local_inv_freq;  // of arch.local_rope, when set
  Tensor embed_scale;
  // The SDPA kernel of the first pass of each PassKind (kBackendUnknown until then).
  mutable std::atomic<std::int64_t> backends[3] = {kBackendUnknown, kBackendUnknown, kBackendUnknown};

  void hook(Hooks* hooks, HookPoint point, int layer, Tensor& value) const {
    if (hooks && hooks->wants(point, layer)) hooks->apply(point, layer, value);
  }

  // x summed over the ranks: by c10d's all-reduce (NCCL, Gloo), or, when
  // autograd records the pass, by the exchange's differentiable sum.
  Tensor reduce(Tensor x) const {
    if (!rank) return x;
    if (at::GradMode::is_enabled()) return rank->exchange->all_reduce_sum(rank->index, x, device);
    x = x.contiguous();
    rank->collectives->all_reduce_sum(x, [exchange = rank->exchange] { return !exchange->failure().empty(); });
    return x;
  }

  // A rank's part of a row-split product summed over the ranks, then its bias and the residual added.
  Tensor joined(const Tensor& part, const Tensor& b, const Tensor& residual) const {
    Tensor out = reduce(part);
    if (b.defined()) out = out + b;
    return residual.defined() ? residual + out : out;
  }

  // The embeddings of ids; a split's rank looks up the ids in its share of the vocabulary, zeros elsewhere, and sums.
  Tensor embed_rows(const Tensor& ids) const {
    if (!rank) return at::embedding(embed, ids);
    Tensor local = ids - rank->vocab_start;
    Tensor outside = (local < 0).logical_or(local >= embed.size(0));
    Tensor rows = at::embedding(embed, local.clamp(0, embed.size(0) - 1)).masked_fill(outside.unsqueeze(-1), 0);
    return reduce(rows);
  }

  Tensor norm(const Tensor& x, const Tensor& w, const Tensor& b) const {
    switch (arch.norm) {
      case NormKind::layer_norm:
        return at::layer_norm(x, {arch.hidden_size}, w, b, arch.norm_eps);
      case NormKind::rms_norm:  // one op: normalized in fp32, cast back, then weighted, as transformers' LlamaRMSNorm
        return at::rms_norm(x, {x.size(-1)}, w, arch.norm_eps);
      case NormKind::rms_norm_one_plus: {  // w holds 1 + weight in fp32 (bound that way)
        Tensor xf = x.to(at::kFloat);
        xf = xf * at::rsqrt(xf.pow(2).mean(-1, true) + arch.norm_eps);
        return (xf * w).to(x.scalar_type());
      }
    }
    return x;
  }

  // x normalized without the norm's weight and bias (TransformerLens' ln*.hook_normalized).
  Tensor normalized(const Tensor& x) const {
    if (arch.norm == NormKind::layer_norm) return at::layer_norm(x, {arch.hidden_size}, {}, {}, arch.norm_eps);
    return at::rms_norm(x, {x.size(-1)}, std::nullopt, arch.norm_eps);
  }

  // The norm's weight and bias applied to a normalized value.
  Tensor weighted(const Tensor& n, const Tensor& w, const Tensor& b) const {
    switch (arch.norm) {
      case NormKind::layer_norm: return b.defined() ? n * w + b : n * w;
      case NormKind::rms_norm: return w * n;
      case NormKind::rms_norm_one_plus: return (n.to(at::kFloat) * w).to(n.scalar_type());
    }
    return n;
  }

  // norm(), with the hook point between normalizing and the weights. Unless
  // an op replaced the hooked value, the result is norm()'s, bit for bit.
  Tensor hooked_norm(Hooks* hooks, HookPoint point, int layer, const Tensor& x, const Tensor& w, const Tensor& b) const {
    Tensor out = norm(x, w, b);
    if (!hooks || !hooks->wants(point, layer)) return out;
    Tensor n = normalized(x);
    Tensor seen = n;
    hooks->apply(point, layer, n);
    // Under autograd the output must come from n, for the gradient at this point to exist.
    return n.is_same(seen) && !n.requires_grad() ? out : weighted(n, w, b);
  }

  Tensor activate(const Tensor& x) const {
    switch (arch.activation) {
      case Activation::gelu_tanh: return at::gelu(x, "tanh");
      case Activation::gelu: return at::gelu(x);
      case Activation::silu: return at::silu(x);
    }
    return x;
  }

  // x [.., in] times a Linear weight [out, in] (or a Conv1D weight [in, out]) plus bias.
  Tensor project(const Tensor& x, const Tensor& w, const Tensor& b) const {
    WeightLayout layout = arch.fused_conv1d ? WeightLayout::in_out : WeightLayout::out_in;
    if (Tensor y = native_linear(x, w, b, layout); y.defined()) return y;
    if (arch.fused_conv1d) {
      auto shape = x.sizes().vec();
      shape.back() = w.size(1);
      Tensor flat = x.reshape({-1, x.size(-1)});
      return (b.defined() ? at::addmm(b, flat, w) : at::mm(flat, w)).view(shape);
    }
    return at::linear(x, w, b.defined() ? std::optional<Tensor>(b) : std::nullopt);
  }

  // residual + (x W + b), the add fused into the product: by the CPU kernel
  // (bit for bit the two steps), or on a GPU as one addmm; else two ops.
  Tensor project_add(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& residual) const {
    WeightLayout layout = arch.fused_conv1d ? WeightLayout::in_out : WeightLayout::out_in;
    if (Tensor y = native_linear(x, w, b, layout, residual); y.defined()) return y;
    if (x.is_cuda() && !b.defined() && !arch.fused_conv1d) {
      return at::addmm(residual.reshape({-1, residual.size(-1)}), x.reshape({-1, x.size(-1)}), w.t()).view(residual.sizes());
    }
    return residual + project(x, w, b);
  }

  // allowed[b, 1, i, s]: query i (at slot start + i, or at cache_slot for a static step) may see key slot s.
  Tensor attention_mask(const Tensor& key_mask, std::int64_t start, std::int64_t tokens,
                        std::optional<std::int64_t> window, const Tensor& cache_slot) const {
    std::int64_t slots = key_mask.size(1);
    Tensor query_slot = cache_slot.defined()
                            ? cache_slot.view({1, 1})
                            : at::arange(start, start + tokens, at::TensorOptions().dtype(at::kLong).device(device)).view({-1, 1});
    Tensor key_slot = at::arange(0, slots, at::TensorOptions().dtype(at::kLong).device(device)).view({1, -1});
    Tensor allowed = key_slot <= query_slot;
    if (window) allowed = allowed.logical_and(query_slot - key_slot < *window);
    allowed = allowed.unsqueeze(0).logical_and(key_mask.unsqueeze(1));
    // A padding query sees at least itself, so no row is all masked (its output is never used).
    allowed = allowed.logical_or((key_slot == query_slot).unsqueeze(0));
    return allowed.unsqueeze(1);
  }

  // Which SDPA kernel PyTorch picks for these inputs (asked once per kind of pass, for model.stats and the log).
  void note_backend(PassKind kind, const Tensor& q, const Tensor& k, const Tensor& v,
                    const std::optional<Tensor>& mask, bool causal) const {
    static constexpr const char* kPassNames[] = {"prefill", "decode", "fixed decode"};
    std::atomic<std::int64_t>& noted = backends[static_cast<int>(kind)];
    std::int64_t unknown = kBackendUnknown;
    if (noted.load(std::memory_order_relaxed) != unknown) return;
    std::int64_t choice = at::_fused_sdp_choice(q, k, v, mask, 0.0, causal, arch.attn_scale, q.size(1) != k.size(1));
    if (noted.compare_exchange_strong(unknown, choice)) {
      std::fprintf(stderr, "gpubox-modeld: attention on %s, %s passes: %s\n", device.str().c_str(),
                   kPassNames[static_cast<int>(kind)], sdpa_backend_name(choice));
    }
  }

  // q, k and v [batch, tokens, heads, head_dim] of x, RoPE applied to q and
  // k, with the hook points q, k, v, rot_q and rot_k on the way. Without
  // hooks, q and k are rotated together, straight from the stacked product.
  std::tuple<Tensor, Tensor, Tensor> rotated_qkv(int layer, const LayerWeights& w, const Tensor& x, const Tensor& cos,
                                                 const Tensor& signed_sin, Hooks* hooks) const {
    std::int64_t batch = x.size(0), tokens = x.size(1);
    std::int64_t heads = arch.num_heads, kv_heads = arch.num_kv_heads, d = arch.head_dim;
    Tensor qkv = project(x, w.qkv_w, w.qkv_b).view({batch, tokens, heads + 2 * kv_heads, d});
    bool rope = arch.rope.kind != RopeKind::none;
    if (!hooks && !arch.qk_norm && rope) {
      auto parts = qkv.split_with_sizes({heads + kv_heads, kv_heads}, 2);
      Tensor qk = rotate(parts[0], cos, signed_sin);
      auto rotated = qk.split_with_sizes({heads, kv_heads}, 2);
      return {rotated[0], rotated[1], parts[1]};
    }
    auto parts = qkv.split_with_sizes({heads, kv_heads, kv_heads}, 2);
    Tensor q = parts[0], k = parts[1], v = parts[2];
    hook(hooks, HookPoint::q, layer, q);
    hook(hooks, HookPoint::k, layer, k);
    hook(hooks, HookPoint::v, layer, v);
    if (arch.qk_norm) q = norm(q, w.q_norm_w, Tensor()), k = norm(k, w.k_norm_w, Tensor());
    if (rope) {
      q = rotate(q, cos, signed_sin);
      k = rotate(k, cos, signed_sin);
      hook(hooks, HookPoint::rot_q, layer, q);
      hook(hooks, HookPoint::rot_k, layer, k);
    }
    return {q, k, v};
  }

  Tensor attention(int layer, const LayerWeights& w, const Tensor& x, const Tensor& cos, const Tensor& signed_sin,
                   std::vector<PassPart>& parts, std::optional<std::int64_t> window, const Tensor& cache_slot,
                   Hooks* hooks, const Tensor& residual) const {
    std::int64_t batch = x.size(0), tokens = x.size(1);
    std::int64_t heads = arch.num_heads, d = arch.head_dim;
    auto [q, k, v] = rotated_qkv(layer, w, x, cos, signed_sin, hooks);
    q = q.transpose(1, 2);  // [batch, heads, tokens, d]
    Tensor z;
    if (parts.size() == 1) {
      z = attend(layer, parts[0], q, k, v, window, cache_slot);
    } else {
      std::vector<Tensor> each;
      for (auto& part : parts) {
        each.push_back(attend(layer, part, q.narrow(0, part.first_row, part.rows), k.narrow(0, part.first_row, part.rows),
                              v.narrow(0, part.first_row, part.rows), window, cache_slot));
      }
      z = at::cat(each, 0);
    }
    z = z.transpose(1, 2);  // [batch, tokens, heads, d]
    hook(hooks, HookPoint::z, layer, z);
    Tensor flat = z.reshape({batch, tokens, heads * d});
    WeightLayout layout = arch.fused_conv1d ? WeightLayout::in_out : WeightLayout::out_in;
    std::vector<HookedRows> requests;
    bool results = hooks && hooks->wants(HookPoint::result, layer);
    if (results) {
      for (const auto& part : parts) requests.push_back({part.first_row, part.rows, part.hooks});
    }
    if (rank) {  // this rank's heads' share of the projection, summed over the ranks; then b_O and the residual
      Tensor out = project(flat, w.o_w, Tensor());
      if (results) out = hooked_results(layer, z, w.o_w, Tensor(), layout, requests, Tensor(), out);
      return joined(out, w.o_b, residual);
    }
    Tensor out = residual.defined() ? project_add(flat, w.o_w, w.o_b, residual) : project(flat, w.o_w, w.o_b);
    if (!results) return out;
    return hooked_results(layer, z, w.o_w, w.o_b, layout, requests, residual, out);
  }

  // One part's attention: its keys k and values v [rows, tokens, kv_heads, d]
  // into its cache, its queries q [rows, heads, tokens, d] over them; z [rows, heads, tokens, d].
  Tensor attend(int layer, PassPart& part, Tensor q, Tensor k, Tensor v, std::optional<std::int64_t> window,
                const Tensor& cache_slot) const {
    std::int64_t tokens = q.size(2);
    std::int64_t heads = arch.num_heads, kv_heads = arch.num_kv_heads;
    KvCache* cache = part.cache;
    Hooks* hooks = part.hooks;
    PassMasks& masks = part.masks;
    if (cache && cache_slot.defined()) {  // a static step: written at a slot on the device, the whole cache read
      auto slot = static_cast<std::size_t>(layer);
      cache->keys[slot].index_copy_(2, cache_slot, k.transpose(1, 2));
      cache->values[slot].index_copy_(2, cache_slot, v.transpose(1, 2));
      k = cache->keys[slot];
      v = cache->values[slot];
    } else if (cache) {
      auto slot = static_cast<std::size_t>(layer);
      cache->keys[slot].narrow(2, cache->length, tokens).copy_(k.transpose(1, 2));
      cache->values[slot].narrow(2, cache->length, tokens).copy_(v.transpose(1, 2));
      k = cache->keys[slot].narrow(2, 0, cache->length + tokens);
      v = cache->values[slot].narrow(2, 0, cache->length + tokens);
    } else {
      k = k.transpose(1, 2), v = v.transpose(1, 2);
    }
    bool explicit_scores = arch.attn_softcap.has_value() ||
                           (hooks && (hooks->wants(HookPoint::attn_scores, layer) || hooks->wants(HookPoint::pattern, layer)));
    MaskNeed need = masks.need(window);
    Tensor z;
    if (!explicit_scores) {
      std::optional<Tensor> mask;
      if (need == MaskNeed::mask) mask = masks.get(window);
      bool causal = need == MaskNeed::causal;
      PassKind kind = tokens > 1 ? PassKind::prefill : cache_slot.defined() ? PassKind::fixed_decode : PassKind::decode;
      if (q.is_cuda() && tokens == 1 && mask && kv_heads != heads) {
        // A masked decode step (static, or padded rows): folded, it takes the memory-efficient kernel,
        // not the math one. On the CPU steps stay as they were, bit for bit.
        Tensor folded_q = q.reshape({q.size(0), kv_heads, heads / kv_heads, q.size(3)});
        note_backend(kind, folded_q, k, v, mask, false);
        z = folded_decode_attention(q, k, v, *mask, arch.attn_scale);
      } else {
        note_backend(kind, q, k, v, mask, causal);
        z = at::scaled_dot_product_attention(q, k, v, mask, 0.0, causal, arch.attn_scale, kv_heads != heads);
      }
    } else {
      if (kv_heads != heads) {
        k = k.repeat_interleave(heads / kv_heads, 1);
        v = v.repeat_interleave(heads / kv_heads, 1);
      }
      Tensor scores = at::matmul(q, k.transpose(2, 3)) * arch.attn_scale;
      if (arch.attn_softcap) scores = at::tanh(scores / *arch.attn_softcap) * *arch.attn_softcap;
      if (need != MaskNeed::none) {
        scores = scores.masked_fill(masks.get(window).logical_not(), -std::numeric_limits<float>::infinity());
      }
      hook(hooks, HookPoint::attn_scores, layer, scores);
      Tensor pattern = at::softmax(scores, -1, at::kFloat).to(q.scalar_type());
      hook(hooks, HookPoint::pattern, layer, pattern);
      z = at::matmul(pattern, v);
    }
    return z;
  }

  // The MLP's output, plus residual when that is given.
  Tensor mlp(int layer, const LayerWeights& w, const Tensor& x, Hooks* hooks, const Tensor& residual) const {
    if (!arch.gated_mlp) {
      Tensor pre = project(x, w.fc_w, w.fc_b);
      hook(hooks, HookPoint::mlp_pre, layer, pre);
      Tensor post = activate(pre);
      hook(hooks, HookPoint::mlp_post, layer, post);
      if (rank) return joined(project(post, w.proj_w, Tensor()), w.proj_b, residual);
      return residual.defined() ? project_add(post, w.proj_w, w.proj_b, residual) : project(post, w.proj_w, w.proj_b);
    }
    auto gate_up = project(x, w.gate_up_w, w.gate_up_b).chunk(2, -1);
    Tensor pre = gate_up[0], linear = gate_up[1];
    hook(hooks, HookPoint::mlp_pre, layer, pre);
    hook(hooks, HookPoint::mlp_pre_linear, layer, linear);
    Tensor post = activate(pre) * linear;
    hook(hooks, HookPoint::mlp_post, layer, post);
    if (rank) return joined(project(post, w.down_w, Tensor()), w.down_b, residual);
    return residual.defined() ? project_add(post, w.down_w, w.down_b, residual) : project(post, w.down_w, w.down_b);
  }
};

// A split model's ranks beyond their weights: their threads, their c10d
// collectives, their exchange through memory; one pass at a time.
struct Decoder::Split {
  Split(int ranks, std::vector<std::unique_ptr<RankCollectives>> links)
      : collectives(std::move(links)), exchange(ranks), workers(ranks) {}
  std::vector<std::unique_ptr<RankCollectives>> collectives;
  RankExchange exchange;
  RankWorkers workers;
  Mutex passes;  // every rank takes part in each pass, so passes run one after another
};

namespace {

// A CPU rank's share of the CPU's threads for a pass (as a process per rank
// would have it), on the thread that runs it; the thread's own count comes back after.
class RankCpuThreads {
 public:
  RankCpuThreads(const c10::Device& device, int ranks) {
    if (!device.is_cpu() || ranks < 2) return;
    before_ = at::get_num_threads();
    set_cpu_threads_of_this_thread(std::max(1, before_ / ranks));
  }
  ~RankCpuThreads() {
    if (before_ > 0) set_cpu_threads_of_this_thread(before_);
  }
  RankCpuThreads(const RankCpuThreads&) = delete;
  RankCpuThreads& operator=(const RankCpuThreads&) = delete;

 private:
  int before_ = 0;
};

// A test's injected rank failure: GPUBOX_MODELD_TEST_FAIL_RANK=R makes rank R
// of the first split model to run a pass throw once, after its collectives of
// that pass, as a rank that dies between them would (tests/model/modeld's
// split suite). True once, on that rank.
bool injected_failure(int rank) {
  static const int failing = [] {
    const char* value = std::getenv("GPUBOX_MODELD_TEST_FAIL_RANK");
    return value && *value ? std::atoi(value) : -1;
  }();
  static std::atomic<bool> taken{false};
  return rank == failing && !taken.exchange(true);
}

// How long a rank waits in a collective for the others before it gives up (a rank that died).
constexpr std::chrono::seconds kCollectiveTimeout{60};

// The splits of an architecture that work: rank counts dividing its heads, KV heads and MLP width.
std::vector<std::int64_t> working_splits(const Architecture& arch) {
  std::vector<std::int64_t> counts;
  for (std::int64_t n = 1; n <= arch.num_kv_heads; ++n) {
    if (arch.num_heads % n == 0 && arch.num_kv_heads % n == 0 && arch.intermediate_size % n == 0) counts.push_back(n);
  }
  return counts;
}

}  // namespace

Decoder::Decoder(std::vector<std::unique_ptr<Weights>> ranks) : ranks_(std::move(ranks)) {}
Decoder::~Decoder() = default;

Result<std::unique_ptr<Decoder>> Decoder::load(const Architecture& arch, const weights::Checkpoint& checkpoint,
                                               c10::ScalarType dtype, c10::Device device, LoadProgress& progress) {
  return load(arch, checkpoint, dtype, std::vector<c10::Device>{device}, progress);
}

Result<std::unique_ptr<Decoder>> Decoder::load(const Architecture& arch, const weights::Checkpoint& checkpoint,
                                               c10::ScalarType dtype, const std::vector<c10::Device>& devices,
                                               LoadProgress& progress) {
  const int ranks = static_cast<int>(devices.size());
  if (ranks > 1 && (arch.num_heads % ranks || arch.num_kv_heads % ranks || arch.intermediate_size % ranks)) {
    return Status(ErrorCode::invalid_request,
                  fmt::format("{} attention heads in {} KV groups with an MLP of {} units do not split over {} ranks "
                              "(each rank holds whole KV groups with their query heads, and as many units); splits that work: {}",
                              arch.num_heads, arch.num_kv_heads, arch.intermediate_size, ranks,
                              fmt::join(working_splits(arch), ", ")));
  }
  std::vector<std::unique_ptr<RankCollectives>> links;
  if (ranks > 1) {
    auto connected = connect_ranks(devices, kCollectiveTimeout);
    if (!connected) return connected.status();
    links = std::move(*connected);
  }
  std::vector<std::unique_ptr<Weights>> loaded;
  std::string where;
  try {
    // Not InferenceMode: inference tensors could not be saved for a backward pass (capture_grad).
    c10::NoGradGuard no_grad;
    for (int r = 0; r < ranks; ++r) {
      c10::Device device = devices[static_cast<std::size_t>(r)];
      where = device.str();
      Shard shard{r, ranks};
      auto w = std::make_unique<Weights>();
      w->arch = rank_architecture(arch, shard);
      w->dtype = dtype;
      w->device = device;
      auto bound = bind_weights(arch, checkpoint, dtype, device, progress, shard);
      if (!bound) return bound.status();
      static_cast<BoundWeights&>(*w) = std::move(*bound);
      const std::int64_t h = arch.hidden_size;
      auto options = at::TensorOptions().device(device);
      if (arch.rope.kind != RopeKind::none) w->inv_freq = inverse_frequencies(arch.rope, arch.head_dim).to(device);
      if (arch.local_rope) w->local_inv_freq = inverse_frequencies(*arch.local_rope, arch.head_dim).to(device);
      if (arch.scale_embeddings) {
        w->embed_scale = at::scalar_tensor(std::sqrt(static_cast<double>(h)), options.dtype(dtype));
      }
      if (ranks > 1) w->rank = Weights::Rank{r, shard.vocab_start(arch.vocab_size), nullptr, links[static_cast<std::size_t>(r)].get()};
      loaded.push_back(std::move(w));
    }
  } catch (const c10::OutOfMemoryError& e) {
    return Status(ErrorCode::resource_exhausted, fmt::format("out of memory on {} while loading: {}", where,
                                                             e.what_without_backtrace()));
  } catch (const c10::Error& e) {
    return Status(ErrorCode::internal, fmt::format("loading failed: {}", e.what_without_backtrace()));
  }
  auto decoder = std::unique_ptr<Decoder>(new Decoder(std::move(loaded)));
  decoder->whole_ = arch;
  if (ranks > 1) {
    decoder->split_ = std::make_unique<Split>(ranks, std::move(links));
    for (auto& w : decoder->ranks_) w->rank->exchange = &decoder->split_->exchange;
  }
  return decoder;
}

at::Tensor Decoder::forward(const ForwardInput& input, KvCache* cache, bool last_only, Hooks* hooks, bool with_grad) const {
  std::vector<PassSegment> whole = {{input.ids.size(0), cache, input.key_mask, input.padded, hooks}};
  return run_pass(input.ids, input.positions, whole, input.cache_slot, last_only, with_grad);
}

at::Tensor Decoder::forward_batch(const at::Tensor& ids, const at::Tensor& positions,
                                  const std::vector<PassSegment>& segments) const {
  return run_pass(ids, positions, segments, Tensor(), true, false);
}

at::Tensor Decoder::run_pass(const at::Tensor& ids, const at::Tensor& positions, const std::vector<PassSegment>& segments,
                             const at::Tensor& cache_slot, bool last_only, bool with_grad) const {
  if (split_) return split_pass(ids, positions, segments, cache_slot, last_only, with_grad);
  return rank_pass(*ranks_[0], ids, positions, segments, cache_slot, last_only, with_grad);
}

at::Tensor Decoder::split_pass(const at::Tensor& ids, const at::Tensor& positions, const std::vector<PassSegment>& segments,
                               const at::Tensor& cache_slot, bool last_only, bool with_grad) const {
  MutexLock one_pass(split_->passes);
  GpuWork gpu_work(ranks_[0]->device.is_cuda());  // for every rank's work (rank_pass's note)
  RankExchange& exchange = split_->exchange;
  if (std::string failure = exchange.failure(); !failure.empty()) throw RankFailure(failure);
  const int ranks = static_cast<int>(ranks_.size());
  // Each rank's caches and hooks: the ranks advance their own cache lengths, the callers' follow rank 0's.
  std::vector<std::vector<PassSegment>> rank_segments(static_cast<std::size_t>(ranks));
  std::vector<std::vector<std::unique_ptr<RankHooks>>> rank_hooks(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    const Weights& w = *ranks_[static_cast<std::size_t>(r)];
    for (const auto& segment : segments) {
      PassSegment mine = segment;
      if (segment.cache) {
        TORCH_CHECK(segment.cache->shards.size() == ranks_.size(), "a split model's cache holds one shard per rank");
        mine.cache = &segment.cache->shards[static_cast<std::size_t>(r)];
        mine.cache->length = segment.cache->length;
      }
      if (segment.key_mask.defined()) mine.key_mask = segment.key_mask.to(w.device);
      if (segment.hooks) {
        rank_hooks[static_cast<std::size_t>(r)].push_back(std::make_unique<RankHooks>(segment.hooks, r, exchange, w.device));
        mine.hooks = rank_hooks[static_cast<std::size_t>(r)].back().get();
      }
      rank_segments[static_cast<std::size_t>(r)].push_back(mine);
    }
  }
  Tensor logits;
  exchange.begin_pass();
  split_->workers.run([&](int r) {
    const Weights& w = *ranks_[static_cast<std::size_t>(r)];
    RankCpuThreads threads(w.device, ranks);
    try {
      Tensor out = rank_pass(w, ids.to(w.device), positions.to(w.device), rank_segments[static_cast<std::size_t>(r)],
                             cache_slot.defined() ? cache_slot.to(w.device) : cache_slot, last_only, with_grad);
      if (r == 0) logits = out;
    } catch (const RankFailure&) {
      throw;  // another rank's failure, already recorded
    } catch (const std::exception& e) {
      if (exchange.pass_abandoned()) throw;  // rank 0's hooks refused the pass: every rank left it at the same point
      const auto* torch_error = dynamic_cast<const c10::Error*>(&e);
      exchange.fail(fmt::format("rank {} on {} failed: {}", r, w.device.str(),
                                torch_error ? torch_error->what_without_backtrace() : e.what()));
      throw RankFailure(exchange.failure());
    }
  });
  for (const auto& segment : segments) {
    if (segment.cache) segment.cache->length = segment.cache->shards[0].length;
  }
  return logits;
}

at::Tensor Decoder::rank_pass(const Weights& w, const at::Tensor& ids, const at::Tensor& positions,
                              const std::vector<PassSegment>& segments, const at::Tensor& cache_slot, bool last_only,
                              bool with_grad) {
  c10::InferenceMode inference(!with_grad);
  // Never during another thread's CUDA graph capture; a split pass holds it once, on the calling
  // thread, for all its ranks (a rank waiting for it while another waits in a collective would deadlock).
  GpuWork gpu_work(w.device.is_cuda() && !w.rank);
  const Architecture& arch = w.arch;
  std::int64_t tokens = ids.size(1);
  bool fixed = cache_slot.defined();
  std::vector<PassPart> parts;
  parts.reserve(segments.size());
  std::int64_t first_row = 0;
  bool any_hooks = false;
  for (const auto& segment : segments) {
    std::int64_t start = segment.cache ? segment.cache->length : 0;
    const Tensor& key_mask = segment.key_mask;
    parts.push_back({first_row, segment.rows, segment.cache, segment.hooks,
                     PassMasks(segment.padded, fixed, start, tokens, [&w, &key_mask, &cache_slot, start, tokens](std::optional<std::int64_t> window) {
                       return w.attention_mask(key_mask, start, tokens, window, cache_slot);
                     })});
    first_row += segment.rows;
    any_hooks = any_hooks || segment.hooks;
  }
  PartHooks part_hooks(parts);
  Hooks* hooks = segments.size() == 1 ? segments[0].hooks : (any_hooks ? &part_hooks : nullptr);
  Tensor h = w.embed_rows(ids);
  if (with_grad) h.requires_grad_(true);
  // hook_embed after Gemma's scale, as transformers' embed_tokens gives it (TransformerLens folds it into W_E).
  if (arch.scale_embeddings) h = h * w.embed_scale;
  w.hook(hooks, HookPoint::embed, -1, h);
  if (arch.learned_positions) {
    Tensor pos = at::embedding(w.pos_embed, positions);
    if (with_grad) pos.requires_grad_(true);
    w.hook(hooks, HookPoint::pos_embed, -1, pos);
    h = h + pos;
  }
  // cos and sin with its first half negated (rotate()), [batch, tokens, 1, head_dim], in the model dtype.
  auto rotation = [&](const Tensor& inv_freq) {
    Tensor freqs = positions.to(at::kFloat).unsqueeze(-1) * inv_freq;
    Tensor angles = at::cat({freqs, freqs}, -1);
    Tensor sin = angles.sin();
    sin.narrow(-1, 0, sin.size(-1) / 2).neg_();
    return std::pair(angles.cos().to(w.dtype).unsqueeze(2), sin.to(w.dtype).unsqueeze(2));
  };
  Tensor cos, signed_sin, local_cos, local_signed_sin;
  if (arch.rope.kind != RopeKind::none) std::tie(cos, signed_sin) = rotation(w.inv_freq);
  if (arch.local_rope) std::tie(local_cos, local_signed_sin) = rotation(w.local_inv_freq);
  for (int layer = 0; layer < static_cast<int>(w.layers.size()); ++layer) {
    RECORD_USER_SCOPE(kLayerScope);  // what decode_profile counts per layer (a flag test when no profiler runs)
    const LayerWeights& lw = w.layers[static_cast<std::size_t>(layer)];
    auto window = arch.layer_window[static_cast<std::size_t>(layer)];
    w.hook(hooks, HookPoint::resid_pre, layer, h);
    Tensor normed = w.hooked_norm(hooks, HookPoint::ln1_normalized, layer, h, lw.ln1_w, lw.ln1_b);
    bool local = window && arch.local_rope;
    // The residual add goes into the output projection unless a norm or a hook sits between them.
    bool fuse_attn_add = !arch.sandwich_norms && !(hooks && hooks->wants(HookPoint::attn_out, layer));
    Tensor attn = w.attention(layer, lw, normed, local ? local_cos : cos, local ? local_signed_sin : signed_sin, parts,
                              window, cache_slot, hooks, fuse_attn_add ? h : Tensor());
    if (fuse_attn_add) {
      h = attn;
    } else {
      if (arch.sandwich_norms) attn = w.norm(attn, lw.post_attn_w, Tensor());
      w.hook(hooks, HookPoint::attn_out, layer, attn);
      h = h + attn;
    }
    w.hook(hooks, HookPoint::resid_mid, layer, h);
    normed = w.hooked_norm(hooks, HookPoint::ln2_normalized, layer, h, lw.ln2_w, lw.ln2_b);
    bool fuse_mlp_add = !arch.sandwich_norms && !(hooks && hooks->wants(HookPoint::mlp_out, layer));
    Tensor out = w.mlp(layer, lw, normed, hooks, fuse_mlp_add ? h : Tensor());
    if (fuse_mlp_add) {
      h = out;
    } else {
      if (arch.sandwich_norms) out = w.norm(out, lw.post_mlp_w, Tensor());
      w.hook(hooks, HookPoint::mlp_out, layer, out);
      h = h + out;
    }
    w.hook(hooks, HookPoint::resid_post, layer, h);
  }
  for (const auto& segment : segments) {
    if (segment.cache && !fixed) segment.cache->length += tokens;
  }
  if (last_only) h = h.narrow(1, tokens - 1, 1);
  h = w.hooked_norm(hooks, HookPoint::ln_final_normalized, -1, h, w.final_w, w.final_b);
  Tensor logits = native_linear(h, w.lm_head, Tensor(), WeightLayout::out_in);
  if (!logits.defined()) logits = at::linear(h, w.lm_head);
  if (arch.final_softcap) logits = at::tanh(logits / *arch.final_softcap) * *arch.final_softcap;
  if (w.rank) {  // each rank's share of the vocabulary, joined on rank 0
    if (injected_failure(w.rank->index)) throw std::runtime_error("injected failure (GPUBOX_MODELD_TEST_FAIL_RANK)");
    auto shares = w.rank->exchange->gather(w.rank->index, logits, w.device);
    if (w.rank->index != 0) return Tensor();
    logits = at::cat(shares, -1);
  }
  w.hook(hooks, HookPoint::logits, -1, logits);
  return logits;
}

void KvCache::zero() {
  for (auto& keys_of_layer : keys) keys_of_layer.zero_();
  for (auto& values_of_layer : values) values_of_layer.zero_();
  for (auto& shard : shards) shard.zero();
}

KvCache Decoder::new_cache(std::int64_t batch, std::int64_t capacity, bool zeroed) const {
  auto rank_cache = [&](const Weights& w) {
    KvCache cache;
    cache.capacity = capacity;
    auto options = at::TensorOptions().dtype(w.dtype).device(w.device);
    for (std::size_t i = 0; i < w.layers.size(); ++i) {
      std::vector<std::int64_t> shape = {batch, w.arch.num_kv_heads, capacity, w.arch.head_dim};
      cache.keys.push_back(zeroed ? at::zeros(shape, options) : at::empty(shape, options));
      cache.values.push_back(zeroed ? at::zeros(shape, options) : at::empty(shape, options));
    }
    return cache;
  };
  if (!split_) return rank_cache(*ranks_[0]);
  KvCache cache;
  cache.capacity = capacity;
  for (const auto& w : ranks_) cache.shards.push_back(rank_cache(*w));
  return cache;
}

const Architecture& Decoder::architecture() const { return whole_; }
c10::ScalarType Decoder::dtype() const { return ranks_[0]->dtype; }
c10::Device Decoder::device() const { return ranks_[0]->device; }
std::vector<c10::Device> Decoder::devices() const {
  std::vector<c10::Device> devices;
  for (const auto& w : ranks_) devices.push_back(w->device);
  return devices;
}
std::vector<std::uint64_t> Decoder::rank_weight_bytes() const {
  std::vector<std::uint64_t> bytes;
  for (const auto& w : ranks_) bytes.push_back(w->held_bytes);
  return bytes;
}
std::uint64_t Decoder::weight_bytes() const {
  auto bytes = rank_weight_bytes();
  return std::accumulate(bytes.begin(), bytes.end(), std::uint64_t{0});
}
std::uint64_t Decoder::parameter_count() const {
  std::uint64_t parameters = 0;
  for (const auto& w : ranks_) parameters += w->parameters;
  return parameters;
}
const std::vector<std::string>& Decoder::unexpected_tensors() const { return ranks_[0]->unexpected; }
std::string Decoder::failure() const { return split_ ? split_->exchange.failure() : std::string(); }
std::string Decoder::attention_backend(PassKind kind) const {
  return sdpa_backend_name(ranks_[0]->backends[static_cast<int>(kind)].load());
}

}  // namespace gpubox::modeld
