// Architecture: what one decoder needs to know about a Hugging Face model,
// read from its config.json. Every architecture is this one struct with its
// differences named once (norm form, MLP, positions, RoPE scaling, soft-caps,
// sliding windows); the decoder reads the choices, never the model type.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace gpubox::modeld {

enum class NormKind {
  layer_norm,          // GPT-2: LayerNorm with bias
  rms_norm,            // Llama: weight * (x / rms(x)) with the cast back before the weight
  rms_norm_one_plus,   // Gemma: (x / rms(x)) * (1 + weight), all in fp32
};
enum class Activation { gelu_tanh, gelu, silu };
enum class RopeKind { none, default_rope, llama3, linear };

struct RopeConfig {
  RopeKind kind = RopeKind::none;
  double theta = 10000.0;
  double factor = 1.0;                        // llama3, linear
  double low_freq_factor = 1.0;               // llama3
  double high_freq_factor = 4.0;              // llama3
  std::int64_t original_max_positions = 8192; // llama3
};

struct Architecture {
  std::string name;  // "gpt2", "llama", "mistral", "qwen2", "gemma2", "gemma3_text"
  std::int64_t vocab_size = 0;
  std::int64_t hidden_size = 0;
  std::int64_t num_layers = 0;
  std::int64_t num_heads = 0;
  std::int64_t num_kv_heads = 0;
  std::int64_t head_dim = 0;
  std::int64_t intermediate_size = 0;
  std::int64_t max_positions = 0;  // context length
  double norm_eps = 1e-5;
  NormKind norm = NormKind::rms_norm;
  Activation activation = Activation::silu;
  bool gated_mlp = true;            // gate/up/down (Llama) vs fc/proj (GPT-2)
  bool learned_positions = false;   // GPT-2's wpe
  bool fused_conv1d = false;        // GPT-2: c_attn/c_proj/c_fc stored as [in, out]
  bool qkv_bias = false;
  bool o_bias = false;
  bool mlp_bias = false;
  bool tie_embeddings = false;
  bool sandwich_norms = false;      // Gemma 2: norms after attention and MLP too
  bool scale_embeddings = false;    // Gemma: embeddings × sqrt(hidden) in the model dtype
  bool qk_norm = false;             // Gemma 3: q and k normalized per head (the model's norm) before RoPE
  double attn_scale = 0;            // multiplies q·k
  std::optional<double> attn_softcap;
  std::optional<double> final_softcap;
  std::vector<std::optional<std::int64_t>> layer_window;  // sliding window per layer, nullopt = full
  RopeConfig rope;                        // of every layer, or of the full-attention ones when local_rope is set
  std::optional<RopeConfig> local_rope;   // Gemma 3: the RoPE of the sliding-window layers
  std::vector<std::int64_t> eos_ids;      // generation_config.json, else config.json
  std::optional<std::int64_t> bos_id;
  std::optional<std::int64_t> pad_id;
};

// The architectures modeld implements, as config.json's model_type names them.
const std::vector<std::string>& supported_architectures();

// Reads config.json (and generation_config.json when given: it wins for EOS).
// An unknown model_type or architecture lists the supported ones; a missing or
// out-of-range field names it, prefixed with source (the file's name).
Result<Architecture> parse_architecture(const nlohmann::json& config, const nlohmann::json* generation_config,
                                        const std::string& source);

}  // namespace gpubox::modeld
