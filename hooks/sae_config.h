// SaeConfig: an SAE's cfg.json in SAELens' on-disk format (6.x, and the
// pre-6.0 keys SAELens itself still reads), checked into the settings the
// model host computes with. No LibTorch: modeld and the fuzz target share it.
// What SAELens honours at inference is supported; every other setting is
// refused by name, never ignored.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace gpubox::hooks {

enum class SaeArchitecture { standard, jumprelu, topk };
// SAELens' normalize_activations at inference: none, constant_norm_rescale
// (x·√d_in/‖x‖ in, undone out), layer_norm (x−μ over σ+1e−5 in, undone out).
enum class SaeNormalization { none, constant_norm_rescale, layer_norm };

struct SaeConfig {
  SaeArchitecture architecture = SaeArchitecture::standard;
  std::int64_t d_in = 0;
  std::int64_t d_sae = 0;
  std::int64_t k = 0;                        // topk: features kept per position
  bool apply_b_dec_to_input = true;          // SAELens' default
  bool rescale_acts_by_decoder_norm = false; // topk: pre-activations × ‖W_dec[f]‖, decode divides
  SaeNormalization normalization = SaeNormalization::none;
  std::string hook_name;                     // metadata.hook_name (or hook_name, hook_point); "" when absent
  std::string model_name;                    // metadata.model_name; "" when absent
  std::string dtype = "float32";             // as stored; the host computes in float32
};

// Parses cfg.json's text; where names the file in errors ("/saes/x/cfg.json").
// invalid_request naming the key for a missing or bad value, and for settings
// SAELens applies that the host does not (hook_z reshaping, a head index,
// expected_average_only_in, covariance_whitening, gated and other architectures).
Result<SaeConfig> parse_sae_config(std::string_view text, const std::string& where);

// "standard", "jumprelu", "topk"
const char* sae_architecture_name(SaeArchitecture architecture);
// "none", "constant_norm_rescale", "layer_norm"
const char* sae_normalization_name(SaeNormalization normalization);

}  // namespace gpubox::hooks
