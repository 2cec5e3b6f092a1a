#include "model/modeld/decoder/architecture.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <fmt/ranges.h>

namespace gpubox::modeld {
namespace {

using nlohmann::json;

// More layers than any model has (the largest have about 130).
constexpr std::int64_t kMaxLayers = 10000;

// Reads config.json fields with errors that name the file and the field.
class FieldReader {
 public:
  FieldReader(const json& config, const std::string& source) : config_(config), source_(source) {}

  Result<std::int64_t> positive(const char* key) const {
    auto it = config_.find(key);
    if (it == config_.end() || !it->is_number_integer() || it->get<std::int64_t>() <= 0) {
      return error(key, "a positive integer");
    }
    return it->get<std::int64_t>();
  }
  // A layer count: per-layer tables are sized by it, so a number no model has is refused, not allocated.
  Result<std::int64_t> layer_count(const char* key) const {
    auto count = positive(key);
    if (count && *count > kMaxLayers) return error(key, fmt::format("a layer count from 1 to {}", kMaxLayers));
    return count;
  }
  Result<std::int64_t> positive_or(const char* key, std::int64_t fallback) const {
    auto it = config_.find(key);
    if (it == config_.end() || it->is_null()) return fallback;
    return positive(key);
  }
  Result<double> number_or(const char* key, double fallback) const {
    auto it = config_.find(key);
    if (it == config_.end() || it->is_null()) return fallback;
    if (!it->is_number()) return error(key, "a number");
    return it->get<double>();
  }
  Result<bool> boolean_or(const char* key, bool fallback) const {
    auto it = config_.find(key);
    if (it == config_.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) return error(key, "true or false");
    return it->get<bool>();
  }
  std::string string_or(const char* key, std::string fallback) const {
    auto it = config_.find(key);
    return it != config_.end() && it->is_string() ? it->get<std::string>() : fallback;
  }
  // A positive number, or null / absent.
  Result<std::optional<double>> optional_positive(const char* key) const {
    auto it = config_.find(key);
    if (it == config_.end() || it->is_null()) return std::optional<double>{};
    if (!it->is_number() || it->get<double>() <= 0) return error(key, "a positive number or null");
    return std::optional<double>(it->get<double>());
  }
  Status error(const std::string& key, const std::string& expected) const {
    return {ErrorCode::invalid_request, fmt::format("{}: \"{}\" must be {}", source_, key, expected)};
  }
  const json& config() const { return config_; }

 private:
  const json& config_;
  std::string source_;  // a copy: readers of a part of config.json are made with a literal ("rope")
};

Result<Activation> parse_activation(const FieldReader& fields, const char* key, const std::string& fallback) {
  std::string name = fields.string_or(key, fallback);
  if (name == "gelu_new" || name == "gelu_pytorch_tanh" || name == "gelu_fast") return Activation::gelu_tanh;
  if (name == "gelu") return Activation::gelu;
  if (name == "silu" || name == "swish") return Activation::silu;
  return fields.error(key, "one of gelu_new, gelu_pytorch_tanh, gelu, silu (got \"" + name + "\")");
}

// Where a RoPE's parameters are: its entry in transformers 5's "rope_parameters"
// (one per layer type in Gemma 3's), and in 4.x's flat fields.
struct RopeSource {
  const char* layer_type = "full_attention";
  const char* legacy_theta = "rope_theta";  // Gemma 3's sliding layers: "rope_local_base_freq"
  bool legacy_scaling = true;               // 4.x's "rope_scaling" applies (to full attention only)
  double default_theta = 10000.0;
};

// RoPE from transformers 5's "rope_parameters" or 4.x's "rope_theta" + "rope_scaling".
Result<RopeConfig> parse_rope(const FieldReader& fields, const RopeSource& source = {}) {
  const json& config = fields.config();
  json params = json::object();
  if (auto it = config.find("rope_parameters"); it != config.end() && it->is_object()) {
    auto per_type = it->find(source.layer_type);
    params = per_type != it->end() && per_type->is_object() ? *per_type : *it;
  } else {
    if (auto scaling = config.find("rope_scaling"); source.legacy_scaling && scaling != config.end() && scaling->is_object()) {
      params = *scaling;
    }
    if (auto theta = config.find(source.legacy_theta); theta != config.end()) params["rope_theta"] = *theta;
  }
  FieldReader rope(params, "rope");
  RopeConfig out;
  auto theta = rope.number_or("rope_theta", source.default_theta);
  if (!theta || *theta <= 0) return fields.error("rope_theta", "a positive number");
  out.theta = *theta;
  std::string type = rope.string_or("rope_type", rope.string_or("type", "default"));
  if (type == "default") {
    out.kind = RopeKind::default_rope;
  } else if (type == "linear" || type == "llama3") {
    out.kind = type == "linear" ? RopeKind::linear : RopeKind::llama3;
    auto factor = rope.number_or("factor", 1.0);
    if (!factor || *factor <= 0) return fields.error("rope factor", "a positive number");
    out.factor = *factor;
    if (out.kind == RopeKind::llama3) {
      auto low = rope.number_or("low_freq_factor", 1.0);
      auto high = rope.number_or("high_freq_factor", 4.0);
      auto original = rope.positive_or("original_max_position_embeddings", 8192);
      if (!low || !high || *high <= *low) return fields.error("rope high_freq_factor", "greater than low_freq_factor");
      if (!original) return original.status();
      out.low_freq_factor = *low;
      out.high_freq_factor = *high;
      out.original_max_positions = *original;
    }
  } else {
    return fields.error("rope_type", "default, linear or llama3 (got \"" + type + "\")");
  }
  return out;
}

// Token ids: an integer, a list of integers, or null.
std::vector<std::int64_t> token_ids(const json& value) {
  std::vector<std::int64_t> ids;
  if (value.is_number_integer()) ids.push_back(value.get<std::int64_t>());
  if (value.is_array()) {
    for (const auto& id : value) {
      if (id.is_number_integer()) ids.push_back(id.get<std::int64_t>());
    }
  }
  return ids;
}

Status read_gpt2(const FieldReader& f, Architecture& a) {
  auto hidden = f.positive("n_embd");
  auto heads = f.positive("n_head");
  auto layers = f.layer_count("n_layer");
  auto positions = f.positive("n_positions");
  if (!hidden) return hidden.status();
  if (!heads) return heads.status();
  if (!layers) return layers.status();
  if (!positions) return positions.status();
  if (*hidden % *heads != 0) return f.error("n_embd", "a multiple of n_head");
  auto inner = f.positive_or("n_inner", 4 * *hidden);
  auto eps = f.number_or("layer_norm_epsilon", 1e-5);
  auto activation = parse_activation(f, "activation_function", "gelu_new");
  auto inverse_layer = f.boolean_or("scale_attn_by_inverse_layer_idx", false);
  auto upcast = f.boolean_or("reorder_and_upcast_attn", false);
  auto scale = f.boolean_or("scale_attn_weights", true);
  if (!inner) return inner.status();
  if (!eps) return eps.status();
  if (!activation) return activation.status();
  if (!inverse_layer || *inverse_layer) return f.error("scale_attn_by_inverse_layer_idx", "false (not supported)");
  if (!upcast || *upcast) return f.error("reorder_and_upcast_attn", "false (not supported)");
  if (!scale) return scale.status();
  a.hidden_size = *hidden;
  a.num_heads = a.num_kv_heads = *heads;
  a.head_dim = *hidden / *heads;
  a.num_layers = *layers;
  a.max_positions = *positions;
  a.intermediate_size = *inner;
  a.norm_eps = *eps;
  a.norm = NormKind::layer_norm;
  a.activation = *activation;
  a.gated_mlp = false;
  a.learned_positions = true;
  a.fused_conv1d = true;
  a.qkv_bias = a.o_bias = a.mlp_bias = true;
  a.attn_scale = *scale ? 1.0 / std::sqrt(static_cast<double>(a.head_dim)) : 1.0;
  a.rope.kind = RopeKind::none;
  return Status::ok();
}

// Llama, Mistral, Qwen2, Gemma 2: the fields their configs share.
Status read_llama_family(const FieldReader& f, Architecture& a) {
  auto hidden = f.positive("hidden_size");
  auto heads = f.positive("num_attention_heads");
  auto layers = f.layer_count("num_hidden_layers");
  auto inner = f.positive("intermediate_size");
  auto positions = f.positive("max_position_embeddings");
  if (!hidden) return hidden.status();
  if (!heads) return heads.status();
  if (!layers) return layers.status();
  if (!inner) return inner.status();
  if (!positions) return positions.status();
  auto kv_heads = f.positive_or("num_key_value_heads", *heads);
  auto head_dim = f.positive_or("head_dim", *hidden / *heads);
  auto eps = f.number_or("rms_norm_eps", 1e-6);
  auto rope = parse_rope(f);
  if (!kv_heads) return kv_heads.status();
  if (!head_dim) return head_dim.status();
  if (!eps) return eps.status();
  if (!rope) return rope.status();
  if (*heads % *kv_heads != 0) return f.error("num_key_value_heads", "a divisor of num_attention_heads");
  a.hidden_size = *hidden;
  a.num_heads = *heads;
  a.num_kv_heads = *kv_heads;
  a.head_dim = *head_dim;
  a.num_layers = *layers;
  a.intermediate_size = *inner;
  a.max_positions = *positions;
  a.norm_eps = *eps;
  a.rope = *rope;
  a.attn_scale = 1.0 / std::sqrt(static_cast<double>(a.head_dim));
  return Status::ok();
}

// Per-layer windows: "layer_types" when the file has it, else every layer
// (Mistral) or the even ones (Gemma 2) when a window is set.
Status read_windows(const FieldReader& f, Architecture& a, bool even_layers_only) {
  a.layer_window.assign(static_cast<std::size_t>(a.num_layers), std::nullopt);
  auto window = f.optional_positive("sliding_window");
  if (!window) return window.status();
  const json& config = f.config();
  auto types = config.find("layer_types");
  if (types != config.end() && types->is_array()) {
    if (static_cast<std::int64_t>(types->size()) != a.num_layers) return f.error("layer_types", "one entry per layer");
    for (std::size_t i = 0; i < types->size(); ++i) {
      const json& type = (*types)[i];
      if (!type.is_string() || (type != "sliding_attention" && type != "full_attention")) {
        return f.error(fmt::format("layer_types[{}]", i), "\"sliding_attention\" or \"full_attention\"");
      }
      if (type == "sliding_attention") {
        if (!*window) return f.error("sliding_window", "set when layer_types has sliding_attention");
        a.layer_window[i] = static_cast<std::int64_t>(**window);
      }
    }
    return Status::ok();
  }
  if (!*window) return Status::ok();
  for (std::size_t i = 0; i < a.layer_window.size(); ++i) {
    if (!even_layers_only || i % 2 == 0) a.layer_window[i] = static_cast<std::int64_t>(**window);
  }
  return Status::ok();
}

// Gemma 3 text, beyond what it shares with Gemma 2: q/k norms, the sliding
// layers from "layer_types" (else every "sliding_window_pattern"-th layer is
// global), and a RoPE of their own for the sliding layers (local base 10k,
// global 1M by default, as transformers' Gemma3TextConfig has them).
Status read_gemma3(const FieldReader& f, Architecture& a) {
  auto bidirectional = f.boolean_or("use_bidirectional_attention", false);
  if (!bidirectional || *bidirectional) return f.error("use_bidirectional_attention", "false (not supported)");
  auto global = parse_rope(f, {"full_attention", "rope_theta", true, 1e6});
  auto local = parse_rope(f, {"sliding_attention", "rope_local_base_freq", false, 1e4});
  if (!global) return global.status();
  if (!local) return local.status();
  a.rope = *global;
  a.local_rope = *local;
  a.qk_norm = true;
  const json& config = f.config();
  if (auto types = config.find("layer_types"); types != config.end() && types->is_array()) return read_windows(f, a, false);
  auto pattern = f.positive_or("sliding_window_pattern", 6);
  auto window = f.optional_positive("sliding_window");
  if (!pattern) return pattern.status();
  if (!window) return window.status();
  a.layer_window.assign(static_cast<std::size_t>(a.num_layers), std::nullopt);
  for (std::int64_t i = 0; *window && i < a.num_layers; ++i) {
    if ((i + 1) % *pattern != 0) a.layer_window[static_cast<std::size_t>(i)] = static_cast<std::int64_t>(**window);
  }
  return Status::ok();
}

Status read_architecture(const std::string& type, const FieldReader& f, Architecture& a) {
  if (type == "gpt2") {
    auto tie = f.boolean_or("tie_word_embeddings", true);
    if (!tie) return tie.status();
    a.tie_embeddings = *tie;
    return read_gpt2(f, a);
  }
  if (Status s = read_llama_family(f, a); !s) return s;
  if (type == "gemma2" || type == "gemma3_text") {
    auto activation = parse_activation(f, "hidden_activation", "gelu_pytorch_tanh");
    auto scalar = f.number_or("query_pre_attn_scalar", 256.0);
    auto attn_cap = f.optional_positive("attn_logit_softcapping");
    auto final_cap = f.optional_positive("final_logit_softcapping");
    auto tie = f.boolean_or("tie_word_embeddings", true);
    if (!activation) return activation.status();
    if (!scalar || *scalar <= 0) return f.error("query_pre_attn_scalar", "a positive number");
    if (!attn_cap) return attn_cap.status();
    if (!final_cap) return final_cap.status();
    if (!tie) return tie.status();
    a.activation = *activation;
    a.norm = NormKind::rms_norm_one_plus;
    a.sandwich_norms = true;
    a.scale_embeddings = true;
    a.attn_scale = 1.0 / std::sqrt(*scalar);
    a.attn_softcap = *attn_cap;
    a.final_softcap = *final_cap;
    a.tie_embeddings = *tie;
    auto bias = f.boolean_or("attention_bias", false);
    if (!bias) return bias.status();
    a.qkv_bias = a.o_bias = *bias;
    if (type == "gemma3_text") return read_gemma3(f, a);
    return read_windows(f, a, true);
  }
  auto activation = parse_activation(f, "hidden_act", "silu");
  auto tie = f.boolean_or("tie_word_embeddings", false);
  if (!activation) return activation.status();
  if (!tie) return tie.status();
  a.activation = *activation;
  a.tie_embeddings = *tie;
  if (type == "qwen2") {
    a.qkv_bias = true;
    auto use_window = f.boolean_or("use_sliding_window", false);
    if (!use_window) return use_window.status();
    if (!*use_window) {
      a.layer_window.assign(static_cast<std::size_t>(a.num_layers), std::nullopt);
      return Status::ok();
    }
    return read_windows(f, a, false);
  }
  auto bias = f.boolean_or("attention_bias", false);
  auto mlp_bias = f.boolean_or("mlp_bias", false);
  if (!bias) return bias.status();
  if (!mlp_bias) return mlp_bias.status();
  a.qkv_bias = a.o_bias = *bias;
  a.mlp_bias = *mlp_bias;
  if (type == "llama") {
    a.layer_window.assign(static_cast<std::size_t>(a.num_layers), std::nullopt);
    return Status::ok();
  }
  return read_windows(f, a, false);  // mistral
}

}  // namespace

const std::vector<std::string>& supported_architectures() {
  static const std::vector<std::string> names = {"gpt2", "llama", "mistral", "qwen2", "gemma2", "gemma3_text"};
  return names;
}

Result<Architecture> parse_architecture(const json& config, const json* generation_config, const std::string& source) {
  if (!config.is_object()) return Status(ErrorCode::invalid_request, source + ": not a JSON object");
  FieldReader fields(config, source);
  std::string type = fields.string_or("model_type", "");
  const auto& supported = supported_architectures();
  if (std::find(supported.begin(), supported.end(), type) == supported.end()) {
    std::string archs = config.contains("architectures") ? config["architectures"].dump() : "none";
    return Status(ErrorCode::invalid_request,
                  fmt::format("{}: unsupported model_type \"{}\" (architectures {}); supported: {}", source, type, archs,
                              fmt::join(supported, ", ")));
  }
  Architecture a;
  a.name = type;
  auto vocab = fields.positive("vocab_size");
  if (!vocab) return vocab.status();
  a.vocab_size = *vocab;
  if (Status s = read_architecture(type, fields, a); !s) return s;
  if (a.layer_window.empty()) a.layer_window.assign(static_cast<std::size_t>(a.num_layers), std::nullopt);

  const json* ids = generation_config && generation_config->is_object() ? generation_config : &config;
  for (const json* from : {ids, &config}) {
    if (a.eos_ids.empty() && from->contains("eos_token_id")) a.eos_ids = token_ids((*from)["eos_token_id"]);
    if (!a.bos_id && from->contains("bos_token_id")) {
      auto bos = token_ids((*from)["bos_token_id"]);
      if (!bos.empty()) a.bos_id = bos.front();
    }
    if (!a.pad_id && from->contains("pad_token_id")) {
      auto pad = token_ids((*from)["pad_token_id"]);
      if (!pad.empty()) a.pad_id = pad.front();
    }
  }
  return a;
}

}  // namespace gpubox::modeld
