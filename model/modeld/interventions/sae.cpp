#include "model/modeld/interventions/sae.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <cmath>
#include <fstream>
#include <sstream>

#include "model/modeld/decoder/cpu_linear.h"
#include "model/modeld/decoder/stored_tensor.h"
#include "model/weights/safetensors.h"

namespace gpubox::modeld {
namespace {

constexpr double kLayerNormEps = 1e-5;  // SAELens' run_time_activation_ln_in

Status invalid(std::string message) { return {ErrorCode::invalid_request, std::move(message)}; }

// The tensor name of file with exactly shape, as float32 on device, every element finite.
Result<at::Tensor> take(const weights::SafetensorsFile& file, const std::string& name, const std::vector<std::int64_t>& shape,
                        c10::Device device) {
  const weights::TensorEntry* entry = file.find(name);
  if (!entry) return invalid(fmt::format("{}: tensor {} is missing", file.path(), name));
  if (entry->shape != shape) {
    return invalid(fmt::format("{}: tensor {} has shape [{}]; cfg.json's d_in and d_sae make it [{}]", file.path(), name,
                               fmt::join(entry->shape, ", "), fmt::join(shape, ", ")));
  }
  auto stored = stored_tensor(file, *entry);
  if (!stored) return stored.status();
  at::Tensor held = stored->to(device, at::kFloat, false, /*copy=*/true);
  at::Tensor flat = held.to(at::kCPU).flatten();
  at::Tensor bad = at::isfinite(flat).logical_not().nonzero();
  if (bad.size(0) > 0) {
    std::int64_t linear = bad[0][0].item<std::int64_t>();
    float element = flat[linear].item<float>();
    std::vector<std::int64_t> index(shape.size());
    for (std::size_t axis = shape.size(); axis-- > 0;) {
      index[axis] = linear % shape[axis];
      linear /= shape[axis];
    }
    return invalid(fmt::format("{}: tensor {} element [{}] is {}; SAE weights must be finite", file.path(), name,
                               fmt::join(index, ", "), std::isnan(element) ? "NaN" : element > 0 ? "+inf" : "-inf"));
  }
  return held;
}

// bias + x·w for x [rows, in] and w [in, out] (float32): on the CPU for a few rows (a decode
// step) by cpu_linear, which reads w once on every thread where LibTorch's matrix-vector
// product runs on one; otherwise LibTorch's addmm (always where autograd records: capture_grad).
at::Tensor affine(const at::Tensor& bias, const at::Tensor& x, const at::Tensor& w) {
  std::int64_t rows = x.size(0);
  if (!x.is_cpu() || x.requires_grad() || rows > kCpuLinearMaxRows || !cpu_linear_available() ||
      !cpu_linear_worth_it(LinearElement::float32, rows)) {
    return at::addmm(bias, x, w);
  }
  at::Tensor input = x.contiguous();
  at::Tensor out = at::empty({rows, w.size(1)}, x.options());
  LinearProblem problem;
  problem.x = input.data_ptr<float>();
  problem.layout = WeightLayout::in_out;
  problem.w = w.data_ptr<float>();
  problem.bias = bias.data_ptr<float>();
  problem.y = out.data_ptr<float>();
  problem.rows = rows;
  problem.in = w.size(0);
  problem.out = w.size(1);
  cpu_linear(problem);
  return out;
}

Result<std::string> read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status(ErrorCode::not_found, path + ": cannot be read (an SAE directory in SAELens' format has cfg.json)");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

Result<std::unique_ptr<Sae>> Sae::load(const std::string& dir, c10::Device device) {
  std::unique_ptr<Sae> sae(new Sae());
  std::string cfg_path = dir + "/cfg.json";
  auto text = read_text(cfg_path);
  if (!text) return text.status();
  auto config = hooks::parse_sae_config(*text, cfg_path);
  if (!config) return config.status();
  sae->config_ = *config;
  auto file = weights::SafetensorsFile::open(dir + "/sae_weights.safetensors");
  if (!file) return file.status();
  const std::int64_t d_in = config->d_in, d_sae = config->d_sae;
#define GPUBOX_SAE_TAKE(field, name, ...)                                  \
  do {                                                                     \
    auto taken = take(**file, name, __VA_ARGS__, device);                  \
    if (!taken) return taken.status();                                     \
    sae->field = std::move(*taken);                                        \
  } while (0)
  GPUBOX_SAE_TAKE(w_enc_, "W_enc", {d_in, d_sae});
  GPUBOX_SAE_TAKE(b_enc_, "b_enc", {d_sae});
  GPUBOX_SAE_TAKE(w_dec_, "W_dec", {d_sae, d_in});
  GPUBOX_SAE_TAKE(b_dec_, "b_dec", {d_in});
  if (config->architecture == hooks::SaeArchitecture::jumprelu) {
    if (!(*file)->find("threshold")) {
      return invalid(fmt::format("{}/sae_weights.safetensors: tensor threshold is missing (a JumpReLU SAE needs it, [{}])", dir, d_sae));
    }
    GPUBOX_SAE_TAKE(threshold_, "threshold", {d_sae});
    sae->positive_threshold_ = sae->threshold_.clamp_min(0.0);
  }
#undef GPUBOX_SAE_TAKE
  if (config->rescale_acts_by_decoder_norm) sae->decoder_norms_ = sae->w_dec_.norm(2, -1);
  return sae;
}

SaeCodes Sae::encode(const at::Tensor& x) const {
  SaeCodes codes;
  at::Tensor in = x.to(at::kFloat);
  switch (config_.normalization) {
    case hooks::SaeNormalization::none: break;
    case hooks::SaeNormalization::constant_norm_rescale:
      codes.scale = std::sqrt(static_cast<double>(config_.d_in)) / in.norm(2, -1, true);
      in = in * codes.scale;
      break;
    case hooks::SaeNormalization::layer_norm: {
      codes.shift = in.mean(-1, true);
      in = in - codes.shift;
      // torch's std: the unbiased estimate, as SAELens' x.std(dim=-1) takes it.
      codes.scale = (in * in).sum(-1, true).div(static_cast<double>(config_.d_in - 1)).sqrt();
      in = in / (codes.scale + kLayerNormEps);
      break;
    }
  }
  if (config_.apply_b_dec_to_input) in = in - b_dec_;
  at::Tensor hidden = affine(b_enc_, in.reshape({-1, config_.d_in}), w_enc_);
  // In place and in one pass each: at 16k features the element-wise passes cost a visible share of the product.
  switch (config_.architecture) {
    case hooks::SaeArchitecture::standard: codes.acts = hidden.relu_(); break;
    case hooks::SaeArchitecture::jumprelu:
      // relu(h)·(h > θ) is h where h > max(θ, 0), else 0.
      codes.acts = hidden.masked_fill_(hidden.le(positive_threshold_), 0.0);
      break;
    case hooks::SaeArchitecture::topk: {
      if (config_.rescale_acts_by_decoder_norm) hidden = hidden * decoder_norms_;
      auto [values, indices] = hidden.topk(config_.k, -1, true, false);
      codes.acts = at::zeros_like(hidden).scatter_(-1, indices, values.relu());
      break;
    }
  }
  std::vector<std::int64_t> shape = x.sizes().vec();
  shape.back() = config_.d_sae;
  codes.acts = codes.acts.view(shape);
  return codes;
}

at::Tensor Sae::decode(const SaeCodes& codes) const { return decode(codes.acts, codes); }

at::Tensor Sae::decode(const at::Tensor& acts, const SaeCodes& codes) const {
  at::Tensor scaled = config_.rescale_acts_by_decoder_norm ? acts / decoder_norms_ : acts;
  at::Tensor out = affine(b_dec_, scaled.reshape({-1, config_.d_sae}), w_dec_);
  std::vector<std::int64_t> shape = acts.sizes().vec();
  shape.back() = config_.d_in;
  out = out.view(shape);
  switch (config_.normalization) {
    case hooks::SaeNormalization::none: break;
    case hooks::SaeNormalization::constant_norm_rescale: out = out / codes.scale; break;
    case hooks::SaeNormalization::layer_norm: out = out * codes.scale + codes.shift; break;
  }
  return out;
}

at::Tensor Sae::decoder_rows(const std::vector<std::int64_t>& features) const {
  return w_dec_.index_select(0, at::tensor(features, at::TensorOptions().dtype(at::kLong)).to(w_dec_.device()));
}

std::uint64_t Sae::bytes() const {
  std::uint64_t total = 0;
  for (const auto* t : {&w_enc_, &b_enc_, &w_dec_, &b_dec_, &threshold_}) {
    if (t->defined()) total += static_cast<std::uint64_t>(t->nbytes());
  }
  return total;
}

}  // namespace gpubox::modeld
