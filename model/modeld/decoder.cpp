#include "model/modeld/decoder.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>
#include <limits>
#include <numbers>
#include <tuple>
#include <utility>

#include "model/modeld/cpu_linear.h"
#include "model/modeld/weight_loader.h"

namespace gpubox::modeld {
namespace {

using at::Tensor;

// x [.., in] times w (a Linear's [out, in] or a Conv1D's [in, out], by
// layout) plus b, by CpuLinear where it applies (a few rows of float32 or
// bfloat16 on a CPU with AVX-512 or AVX2, no gradient wanted; cpu_linear.h), else
// undefined. GPUBOX_MODELD_LIBTORCH_LINEAR=1 leaves every product to LibTorch.
Tensor native_linear(const Tensor& x, const Tensor& w, const Tensor& b, WeightLayout layout) {
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
  if (!cpu_linear_worth_it(element, rows) || x.size(-1) != in) return {};
  bool grad = x.requires_grad() || w.requires_grad() || (b.defined() && b.requires_grad());
  if (grad && at::GradMode::is_enabled()) return {};
  Tensor input = x.contiguous();
  auto shape = x.sizes().vec();
  shape.back() = out;
  Tensor y = at::empty(shape, x.options());
  const void* bias = b.defined() ? b.data_ptr() : nullptr;
  cpu_linear({element, input.data_ptr(), layout, w.data_ptr(), bias, y.data_ptr(), rows, in, out});
  return y;
}

Tensor rotate_half(const Tensor& x) {
  auto halves = x.chunk(2, -1);
  return at::cat({-halves[1], halves[0]}, -1);
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

}  // namespace

// The bound weights and what the forward pass derives from them once.
struct Decoder::Weights : BoundWeights {
  Architecture arch;
  c10::ScalarType dtype = at::kFloat;
  c10::Device device = c10::Device(c10::kCPU);
  Tensor inv_freq;        // fp32 on device
  Tensor local_inv_freq;  // of arch.local_rope, when set
  Tensor embed_scale;

  void hook(Hooks* hooks, HookPoint point, int layer, Tensor& value) const {
    if (hooks && hooks->wants(point, layer)) hooks->apply(point, layer, value);
  }

  Tensor norm(const Tensor& x, const Tensor& w, const Tensor& b) const {
    switch (arch.norm) {
      case NormKind::layer_norm:
        return at::layer_norm(x, {arch.hidden_size}, w, b, arch.norm_eps);
      case NormKind::rms_norm: {
        Tensor xf = x.to(at::kFloat);
        xf = xf * at::rsqrt(xf.pow(2).mean(-1, true) + arch.norm_eps);
        return w * xf.to(x.scalar_type());
      }
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
    Tensor xf = x.to(at::kFloat);
    return (xf * at::rsqrt(xf.pow(2).mean(-1, true) + arch.norm_eps)).to(x.scalar_type());
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

  // allowed[b, 1, i, s]: query i (at slot start + i) may see key slot s.
  Tensor attention_mask(const Tensor& key_mask, std::int64_t start, std::int64_t tokens,
                        std::optional<std::int64_t> window) const {
    std::int64_t slots = key_mask.size(1);
    Tensor query_slot = at::arange(start, start + tokens, at::TensorOptions().dtype(at::kLong).device(device)).view({-1, 1});
    Tensor key_slot = at::arange(0, slots, at::TensorOptions().dtype(at::kLong).device(device)).view({1, -1});
    Tensor allowed = key_slot <= query_slot;
    if (window) allowed = allowed.logical_and(query_slot - key_slot < *window);
    allowed = allowed.unsqueeze(0).logical_and(key_mask.unsqueeze(1));
    // A padding query sees at least itself, so no row is all masked (its output is never used).
    allowed = allowed.logical_or((key_slot == query_slot).unsqueeze(0));
    return allowed.unsqueeze(1);
  }

  Tensor attention(int layer, const LayerWeights& w, const Tensor& x, const Tensor& cos, const Tensor& sin,
                   const Tensor& mask, KvCache* cache, Hooks* hooks) const {
    std::int64_t batch = x.size(0), tokens = x.size(1);
    std::int64_t heads = arch.num_heads, kv_heads = arch.num_kv_heads, d = arch.head_dim;
    Tensor q, k, v;
    if (arch.fused_conv1d) {
      auto parts = project(x, w.qkv_w, w.qkv_b).split(heads * d, -1);
      q = parts[0], k = parts[1], v = parts[2];
    } else {
      q = project(x, w.q_w, w.q_b), k = project(x, w.k_w, w.k_b), v = project(x, w.v_w, w.v_b);
    }
    q = q.view({batch, tokens, heads, d});
    k = k.view({batch, tokens, kv_heads, d});
    v = v.view({batch, tokens, kv_heads, d});
    hook(hooks, HookPoint::q, layer, q);
    hook(hooks, HookPoint::k, layer, k);
    hook(hooks, HookPoint::v, layer, v);
    if (arch.qk_norm) q = norm(q, w.q_norm_w, Tensor()), k = norm(k, w.k_norm_w, Tensor());
    q = q.transpose(1, 2);
    k = k.transpose(1, 2);
    v = v.transpose(1, 2);
    if (arch.rope.kind != RopeKind::none) {
      q = q * cos + rotate_half(q) * sin;
      k = k * cos + rotate_half(k) * sin;
      if (hooks) {
        Tensor rq = q.transpose(1, 2), rk = k.transpose(1, 2);
        hook(hooks, HookPoint::rot_q, layer, rq);
        hook(hooks, HookPoint::rot_k, layer, rk);
        q = rq.transpose(1, 2), k = rk.transpose(1, 2);
      }
    }
    if (cache) {
      auto slot = static_cast<std::size_t>(layer);
      cache->keys[slot].narrow(2, cache->length, tokens).copy_(k);
      cache->values[slot].narrow(2, cache->length, tokens).copy_(v);
      k = cache->keys[slot].narrow(2, 0, cache->length + tokens);
      v = cache->values[slot].narrow(2, 0, cache->length + tokens);
    }
    bool explicit_scores = arch.attn_softcap.has_value() ||
                           (hooks && (hooks->wants(HookPoint::attn_scores, layer) || hooks->wants(HookPoint::pattern, layer)));
    Tensor z;
    if (!explicit_scores) {
      z = at::scaled_dot_product_attention(q, k, v, mask, 0.0, false, arch.attn_scale, kv_heads != heads);
    } else {
      if (kv_heads != heads) {
        k = k.repeat_interleave(heads / kv_heads, 1);
        v = v.repeat_interleave(heads / kv_heads, 1);
      }
      Tensor scores = at::matmul(q, k.transpose(2, 3)) * arch.attn_scale;
      if (arch.attn_softcap) scores = at::tanh(scores / *arch.attn_softcap) * *arch.attn_softcap;
      scores = scores.masked_fill(mask.logical_not(), -std::numeric_limits<float>::infinity());
      hook(hooks, HookPoint::attn_scores, layer, scores);
      Tensor pattern = at::softmax(scores, -1, at::kFloat).to(q.scalar_type());
      hook(hooks, HookPoint::pattern, layer, pattern);
      z = at::matmul(pattern, v);
    }
    z = z.transpose(1, 2);  // [batch, tokens, heads, d]
    hook(hooks, HookPoint::z, layer, z);
    return project(z.reshape({batch, tokens, heads * d}), w.o_w, w.o_b);
  }

  Tensor mlp(int layer, const LayerWeights& w, const Tensor& x, Hooks* hooks) const {
    if (!arch.gated_mlp) {
      Tensor pre = project(x, w.fc_w, w.fc_b);
      hook(hooks, HookPoint::mlp_pre, layer, pre);
      Tensor post = activate(pre);
      hook(hooks, HookPoint::mlp_post, layer, post);
      return project(post, w.proj_w, w.proj_b);
    }
    Tensor pre = project(x, w.gate_w, w.gate_b);
    hook(hooks, HookPoint::mlp_pre, layer, pre);
    Tensor linear = project(x, w.up_w, w.up_b);
    hook(hooks, HookPoint::mlp_pre_linear, layer, linear);
    Tensor post = activate(pre) * linear;
    hook(hooks, HookPoint::mlp_post, layer, post);
    return project(post, w.down_w, w.down_b);
  }
};

Decoder::Decoder(std::unique_ptr<Weights> weights) : weights_(std::move(weights)) {}
Decoder::~Decoder() = default;

Result<std::unique_ptr<Decoder>> Decoder::load(const Architecture& arch, const weights::Checkpoint& checkpoint,
                                               c10::ScalarType dtype, c10::Device device, LoadProgress& progress) {
  try {
    // Not InferenceMode: inference tensors could not be saved for a backward pass (capture_grad).
    c10::NoGradGuard no_grad;
    auto w = std::make_unique<Weights>();
    w->arch = arch;
    w->dtype = dtype;
    w->device = device;
    auto bound = bind_weights(arch, checkpoint, dtype, device, progress);
    if (!bound) return bound.status();
    static_cast<BoundWeights&>(*w) = std::move(*bound);
    const std::int64_t h = arch.hidden_size;
    auto options = at::TensorOptions().device(device);
    if (arch.rope.kind != RopeKind::none) w->inv_freq = inverse_frequencies(arch.rope, arch.head_dim).to(device);
    if (arch.local_rope) w->local_inv_freq = inverse_frequencies(*arch.local_rope, arch.head_dim).to(device);
    if (arch.scale_embeddings) {
      w->embed_scale = at::scalar_tensor(std::sqrt(static_cast<double>(h)), options.dtype(dtype));
    }
    return std::unique_ptr<Decoder>(new Decoder(std::move(w)));
  } catch (const c10::OutOfMemoryError& e) {
    return Status(ErrorCode::resource_exhausted, fmt::format("out of memory on {} while loading: {}", device.str(),
                                                             e.what_without_backtrace()));
  } catch (const c10::Error& e) {
    return Status(ErrorCode::internal, fmt::format("loading failed: {}", e.what_without_backtrace()));
  }
}

at::Tensor Decoder::forward(const ForwardInput& input, KvCache* cache, bool last_only, Hooks* hooks, bool with_grad) const {
  c10::InferenceMode inference(!with_grad);
  const Weights& w = *weights_;
  const Architecture& arch = w.arch;
  std::int64_t tokens = input.ids.size(1);
  std::int64_t start = cache ? cache->length : 0;
  Tensor h = at::embedding(w.embed, input.ids);
  if (with_grad) h.requires_grad_(true);
  // hook_embed after Gemma's scale, as transformers' embed_tokens gives it (TransformerLens folds it into W_E).
  if (arch.scale_embeddings) h = h * w.embed_scale;
  w.hook(hooks, HookPoint::embed, -1, h);
  if (arch.learned_positions) {
    Tensor pos = at::embedding(w.pos_embed, input.positions);
    if (with_grad) pos.requires_grad_(true);
    w.hook(hooks, HookPoint::pos_embed, -1, pos);
    h = h + pos;
  }
  // cos and sin [batch, 1, tokens, head_dim] of the positions, in the model dtype.
  auto rotation = [&](const Tensor& inv_freq) {
    Tensor freqs = input.positions.to(at::kFloat).unsqueeze(-1) * inv_freq;
    Tensor angles = at::cat({freqs, freqs}, -1);
    return std::pair(angles.cos().to(w.dtype).unsqueeze(1), angles.sin().to(w.dtype).unsqueeze(1));
  };
  Tensor cos, sin, local_cos, local_sin;
  if (arch.rope.kind != RopeKind::none) std::tie(cos, sin) = rotation(w.inv_freq);
  if (arch.local_rope) std::tie(local_cos, local_sin) = rotation(w.local_inv_freq);
  Tensor full_mask, window_mask;
  std::optional<std::int64_t> mask_window;
  for (int layer = 0; layer < static_cast<int>(w.layers.size()); ++layer) {
    const LayerWeights& lw = w.layers[static_cast<std::size_t>(layer)];
    auto window = arch.layer_window[static_cast<std::size_t>(layer)];
    Tensor* mask = &full_mask;
    if (window) {
      if (!window_mask.defined() || mask_window != window) {
        window_mask = w.attention_mask(input.key_mask, start, tokens, window);
        mask_window = window;
      }
      mask = &window_mask;
    } else if (!full_mask.defined()) {
      full_mask = w.attention_mask(input.key_mask, start, tokens, std::nullopt);
    }
    w.hook(hooks, HookPoint::resid_pre, layer, h);
    Tensor normed = w.hooked_norm(hooks, HookPoint::ln1_normalized, layer, h, lw.ln1_w, lw.ln1_b);
    bool local = window && arch.local_rope;
    Tensor attn = w.attention(layer, lw, normed, local ? local_cos : cos, local ? local_sin : sin, *mask, cache, hooks);
    if (arch.sandwich_norms) attn = w.norm(attn, lw.post_attn_w, Tensor());
    w.hook(hooks, HookPoint::attn_out, layer, attn);
    h = h + attn;
    w.hook(hooks, HookPoint::resid_mid, layer, h);
    normed = w.hooked_norm(hooks, HookPoint::ln2_normalized, layer, h, lw.ln2_w, lw.ln2_b);
    Tensor out = w.mlp(layer, lw, normed, hooks);
    if (arch.sandwich_norms) out = w.norm(out, lw.post_mlp_w, Tensor());
    w.hook(hooks, HookPoint::mlp_out, layer, out);
    h = h + out;
    w.hook(hooks, HookPoint::resid_post, layer, h);
  }
  if (cache) cache->length += tokens;
  if (last_only) h = h.narrow(1, tokens - 1, 1);
  h = w.hooked_norm(hooks, HookPoint::ln_final_normalized, -1, h, w.final_w, w.final_b);
  Tensor logits = native_linear(h, w.lm_head, Tensor(), WeightLayout::out_in);
  if (!logits.defined()) logits = at::linear(h, w.lm_head);
  if (arch.final_softcap) logits = at::tanh(logits / *arch.final_softcap) * *arch.final_softcap;
  w.hook(hooks, HookPoint::logits, -1, logits);
  return logits;
}

KvCache Decoder::new_cache(std::int64_t batch, std::int64_t capacity) const {
  const Weights& w = *weights_;
  KvCache cache;
  cache.capacity = capacity;
  auto options = at::TensorOptions().dtype(w.dtype).device(w.device);
  for (std::size_t i = 0; i < w.layers.size(); ++i) {
    cache.keys.push_back(at::empty({batch, w.arch.num_kv_heads, capacity, w.arch.head_dim}, options));
    cache.values.push_back(at::empty({batch, w.arch.num_kv_heads, capacity, w.arch.head_dim}, options));
  }
  return cache;
}

const Architecture& Decoder::architecture() const { return weights_->arch; }
c10::ScalarType Decoder::dtype() const { return weights_->dtype; }
c10::Device Decoder::device() const { return weights_->device; }
std::uint64_t Decoder::weight_bytes() const { return weights_->held_bytes; }
std::uint64_t Decoder::parameter_count() const { return weights_->parameters; }
const std::vector<std::string>& Decoder::unexpected_tensors() const { return weights_->unexpected; }

}  // namespace gpubox::modeld
