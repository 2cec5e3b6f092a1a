// Sae: one sparse autoencoder in SAELens' on-disk format (cfg.json +
// sae_weights.safetensors), held in float32 on the model's device, with
// SAELens' encode and decode (standard, JumpReLU, TopK; apply_b_dec_to_input
// and the run-time normalisations). Immutable after load: any thread may
// encode and decode at once.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "hooks/sae_config.h"

namespace gpubox::modeld {

// What encode learned of its input that decode needs to undo the normalisation.
struct SaeCodes {
  at::Tensor acts;   // [..., d_sae] float32: the feature activations (SAELens' encode)
  at::Tensor scale;  // [..., 1] or undefined: constant_norm_rescale's coefficient, layer_norm's σ
  at::Tensor shift;  // [..., 1] or undefined: layer_norm's μ
};

class Sae {
 public:
  // Reads dir/cfg.json and dir/sae_weights.safetensors: W_enc [d_in, d_sae],
  // b_enc [d_sae], W_dec [d_sae, d_in], b_dec [d_in], and threshold [d_sae]
  // for JumpReLU. invalid_request naming the file and tensor for a missing
  // or misshapen tensor, a missing threshold, or a NaN or infinity in any.
  static Result<std::unique_ptr<Sae>> load(const std::string& dir, c10::Device device);
  Sae(const Sae&) = delete;
  Sae& operator=(const Sae&) = delete;

  const hooks::SaeConfig& config() const { return config_; }
  // x [..., d_in] of any float dtype.
  SaeCodes encode(const at::Tensor& x) const;
  // [..., d_in] float32: SAELens' decode of codes.acts (or of acts, edited codes of the same input).
  at::Tensor decode(const SaeCodes& codes) const;
  at::Tensor decode(const at::Tensor& acts, const SaeCodes& codes) const;
  // W_dec's rows for features, [features, d_in] float32.
  at::Tensor decoder_rows(const std::vector<std::int64_t>& features) const;
  std::uint64_t bytes() const;

 private:
  Sae() = default;
  hooks::SaeConfig config_;
  at::Tensor w_enc_, b_enc_, w_dec_, b_dec_, threshold_;
  at::Tensor decoder_norms_;       // ‖W_dec[f]‖, for rescale_acts_by_decoder_norm
  at::Tensor positive_threshold_;  // JumpReLU: max(threshold, 0)
};

}  // namespace gpubox::modeld
