#include "hooks/sae_config.h"

#include <algorithm>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace gpubox::hooks {
namespace {

using nlohmann::json;

Status invalid_key(const std::string& where, const std::string& key, const std::string& what) {
  return {ErrorCode::invalid_request, fmt::format("{}: {}: {}", where, key, what)};
}

// config[key], or metadata[key] (SAELens 6 keeps hook and model names there); null when neither has it.
const json* lookup(const json& config, const char* key) {
  if (auto it = config.find(key); it != config.end() && !it->is_null()) return &*it;
  if (auto meta = config.find("metadata"); meta != config.end() && meta->is_object()) {
    if (auto it = meta->find(key); it != meta->end() && !it->is_null()) return &*it;
  }
  return nullptr;
}

Result<std::int64_t> positive(const json& config, const char* key, const std::string& where, std::int64_t most) {
  const json* value = lookup(config, key);
  if (!value) return invalid_key(where, key, "required (a positive integer)");
  if (!value->is_number_integer() || value->get<std::int64_t>() < 1 || value->get<std::int64_t>() > most) {
    return invalid_key(where, key, fmt::format("expected an integer from 1 to {}, got {}", most, value->dump()));
  }
  return value->get<std::int64_t>();
}

Result<bool> boolean(const json& config, const char* key, const std::string& where, bool fallback) {
  const json* value = lookup(config, key);
  if (!value) return fallback;
  if (!value->is_boolean()) return invalid_key(where, key, fmt::format("expected true or false, got {}", value->dump()));
  return value->get<bool>();
}

Result<std::string> text(const json& config, const char* key, const std::string& where) {
  const json* value = lookup(config, key);
  if (!value) return std::string();
  if (!value->is_string()) return invalid_key(where, key, fmt::format("expected a string, got {}", value->dump()));
  return value->get<std::string>();
}

// The architecture, with SAELens' pre-6.0 spelling: activation_fn(_str) "topk" and activation_fn_kwargs.k.
Result<SaeArchitecture> read_architecture(const json& config, const std::string& where, const json*& k_value) {
  k_value = lookup(config, "k");
  auto name = text(config, "architecture", where);
  if (!name) return name.status();
  std::string activation;
  for (const char* key : {"activation_fn", "activation_fn_str"}) {
    auto given = text(config, key, where);
    if (!given) return given.status();
    if (!given->empty()) activation = *given;
  }
  if (name->empty()) {
    if (activation == "topk") {
      *name = "topk";
      if (auto kwargs = config.find("activation_fn_kwargs"); kwargs != config.end() && kwargs->is_object() && kwargs->contains("k")) {
        k_value = &kwargs->at("k");
      }
    } else {
      *name = "standard";  // SAELens' default for configs that predate the key
    }
  }
  if (*name == "standard") {
    if (!activation.empty() && activation != "relu") {
      return invalid_key(where, "activation_fn", fmt::format("\"{}\" is not supported (a standard SAE here uses relu)", activation));
    }
    return SaeArchitecture::standard;
  }
  if (*name == "jumprelu") return SaeArchitecture::jumprelu;
  if (*name == "topk") return SaeArchitecture::topk;
  return invalid_key(where, "architecture", fmt::format("\"{}\" is not supported (supported: standard, jumprelu, topk)", *name));
}

Result<SaeConfig> parse_object(const json& config, const std::string& where);

}  // namespace

const char* sae_architecture_name(SaeArchitecture architecture) {
  switch (architecture) {
    case SaeArchitecture::standard: return "standard";
    case SaeArchitecture::jumprelu: return "jumprelu";
    case SaeArchitecture::topk: return "topk";
  }
  return "standard";
}

const char* sae_normalization_name(SaeNormalization normalization) {
  switch (normalization) {
    case SaeNormalization::none: return "none";
    case SaeNormalization::constant_norm_rescale: return "constant_norm_rescale";
    case SaeNormalization::layer_norm: return "layer_norm";
  }
  return "none";
}

Result<SaeConfig> parse_sae_config(std::string_view text_in, const std::string& where) {
  json config = json::parse(text_in.begin(), text_in.end(), nullptr, false);
  if (config.is_discarded()) return Status(ErrorCode::invalid_request, where + ": not valid JSON");
  return parse_object(config, where);
}

namespace {

Result<SaeConfig> parse_object(const json& config, const std::string& where) {
  if (!config.is_object()) return Status(ErrorCode::invalid_request, where + ": expected a JSON object (SAELens' cfg.json)");
  SaeConfig out;
  const json* k_value = nullptr;
  auto architecture = read_architecture(config, where, k_value);
  if (!architecture) return architecture.status();
  out.architecture = *architecture;
  constexpr std::int64_t kMostWidth = std::int64_t{1} << 24;  // 16M: beyond any released SAE, and no product overflows
  auto d_in = positive(config, "d_in", where, kMostWidth);
  if (!d_in) return d_in.status();
  auto d_sae = positive(config, "d_sae", where, kMostWidth);
  if (!d_sae) return d_sae.status();
  out.d_in = *d_in;
  out.d_sae = *d_sae;
  if (out.architecture == SaeArchitecture::topk) {
    if (!k_value) {
      out.k = std::min<std::int64_t>(100, out.d_sae);  // SAELens' TopKSAEConfig default, capped at the width
      if (out.d_sae < 100) return invalid_key(where, "k", fmt::format("required: SAELens' default of 100 is over d_sae {}", out.d_sae));
    } else if (!k_value->is_number_integer() || k_value->get<std::int64_t>() < 1 || k_value->get<std::int64_t>() > out.d_sae) {
      return invalid_key(where, "k", fmt::format("expected an integer from 1 to d_sae ({}), got {}", out.d_sae, k_value->dump()));
    } else {
      out.k = k_value->get<std::int64_t>();
    }
    auto rescale = boolean(config, "rescale_acts_by_decoder_norm", where, false);
    if (!rescale) return rescale.status();
    out.rescale_acts_by_decoder_norm = *rescale;
  }
  auto apply = boolean(config, "apply_b_dec_to_input", where, true);
  if (!apply) return apply.status();
  out.apply_b_dec_to_input = *apply;

  auto normalize = text(config, "normalize_activations", where);
  if (!normalize) return normalize.status();
  if (normalize->empty() || *normalize == "none") {
    out.normalization = SaeNormalization::none;
  } else if (*normalize == "constant_norm_rescale") {
    out.normalization = SaeNormalization::constant_norm_rescale;
  } else if (*normalize == "layer_norm") {
    out.normalization = SaeNormalization::layer_norm;
  } else if (*normalize == "expected_average_only_in") {
    return invalid_key(where, "normalize_activations",
                   "\"expected_average_only_in\" needs a scaling factor that is not in cfg.json; fold it into the "
                   "weights (SAELens: sae.fold_activation_norm_scaling_factor, then save_model) and set \"none\"");
  } else {
    return invalid_key(where, "normalize_activations",
                   fmt::format("\"{}\" is not supported (supported: none, constant_norm_rescale, layer_norm)", *normalize));
  }
  auto reshape = text(config, "reshape_activations", where);
  if (!reshape) return reshape.status();
  if (!reshape->empty() && *reshape != "none") {
    return invalid_key(where, "reshape_activations", fmt::format("\"{}\" is not supported (SAEs on hook_z are not yet)", *reshape));
  }
  if (const json* head = lookup(config, "hook_head_index"); head) {
    return invalid_key(where, "hook_head_index", fmt::format("{}: SAEs of one head are not supported", head->dump()));
  }
  if (const json* scaling = lookup(config, "finetuning_scaling_factor"); scaling && !(scaling->is_boolean() && !scaling->get<bool>())) {
    return invalid_key(where, "finetuning_scaling_factor", "not supported (fold it into W_dec)");
  }
  for (const char* key : {"hook_name", "hook_point"}) {
    auto hook = text(config, key, where);
    if (!hook) return hook.status();
    if (out.hook_name.empty()) out.hook_name = *hook;
  }
  auto model = text(config, "model_name", where);
  if (!model) return model.status();
  out.model_name = *model;
  auto dtype = text(config, "dtype", where);
  if (!dtype) return dtype.status();
  if (!dtype->empty()) out.dtype = *dtype;
  return out;
}

}  // namespace

}  // namespace gpubox::hooks
