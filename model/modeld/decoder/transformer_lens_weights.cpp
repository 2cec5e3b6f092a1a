#include "model/modeld/decoder/transformer_lens_weights.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <map>
#include <optional>
#include <regex>

#include "model/modeld/decoder/stored_tensor.h"

namespace gpubox::modeld {
namespace {

using at::Tensor;

// A checkpoint tensor by its Hugging Face name, float32 on the CPU (a copy).
Result<Tensor> stored(const weights::Checkpoint& checkpoint, const std::string& name) {
  auto found = checkpoint.find(name);
  if (!found) return Status(ErrorCode::invalid_request, fmt::format("tensor {} is missing from the checkpoint", name));
  auto view = stored_tensor(*found->file, *found->entry);
  if (!view) return view.status();
  return view->to(at::kFloat, false, /*copy=*/true);
}

// Reads a block-less or per-block TransformerLens name into its parts.
struct ParsedName {
  int layer = -1;      // -1 outside blocks
  std::string module;  // "attn", "mlp", "ln1", "ln2", "ln_final", "embed", "pos_embed", "unembed"
  std::string param;   // "W_Q", "b_in", "w", ...
};

std::optional<ParsedName> parse(const std::string& name) {
  static const std::map<std::string, std::string> short_names = {
      {"W_E", "embed.W_E"}, {"W_pos", "pos_embed.W_pos"}, {"W_U", "unembed.W_U"}};
  std::string full = short_names.count(name) ? short_names.at(name) : name;
  static const std::regex block(R"(blocks\.(\d{1,4})\.(attn|mlp|ln1|ln2)\.(\w+))");
  static const std::regex top(R"((embed|pos_embed|unembed|ln_final)\.(\w+))");
  std::smatch m;
  if (std::regex_match(full, m, block)) return ParsedName{std::stoi(m[1]), m[2], m[3]};
  if (std::regex_match(full, m, top)) return ParsedName{-1, m[1], m[2]};
  return std::nullopt;
}

// [heads·d_head, d_model] (a Linear's weight) → [heads, d_model, d_head].
Tensor heads_in(const Tensor& w, std::int64_t heads, std::int64_t d_head) {
  return w.view({heads, d_head, w.size(1)}).transpose(1, 2).contiguous();
}

// Reads one parsed TransformerLens name of one architecture from its checkpoint; lives for one call.
class Reader {
 public:
  Reader(const Architecture& a, const weights::Checkpoint& c) : a_(a), c_(c) {
    gpt2_prefix_ = c.find("transformer.wte.weight") ? "transformer." : "";
  }

  Result<Tensor> read(const ParsedName& n) {
    if (n.layer >= a_.num_layers) return unknown();
    if (a_.fused_conv1d) return read_gpt2(n);
    return read_gated(n);
  }

  static Status unknown() { return Status(ErrorCode::invalid_request, ""); }

 private:
  Result<Tensor> norm(const std::string& name) {
    auto w = stored(c_, name);
    if (!w) return w;
    if (a_.norm == NormKind::rms_norm_one_plus) return *w + 1.0;  // as the norm multiplies by it, and TransformerLens stores it
    return w;
  }

  Result<Tensor> unembed() {
    auto w = stored(c_, c_.find("lm_head.weight") ? "lm_head.weight" : a_.fused_conv1d ? gpt2_prefix_ + "wte.weight" : "model.embed_tokens.weight");
    if (!w) return w;
    return w->t().contiguous();
  }

  Result<Tensor> read_gpt2(const ParsedName& n) {
    const std::int64_t h = a_.hidden_size, heads = a_.num_heads, d_head = a_.head_dim;
    std::string b = fmt::format("{}h.{}.", gpt2_prefix_, n.layer);
    if (n.module == "embed" && n.param == "W_E") return stored(c_, gpt2_prefix_ + "wte.weight");
    if (n.module == "pos_embed" && n.param == "W_pos") return stored(c_, gpt2_prefix_ + "wpe.weight");
    if (n.module == "unembed" && n.param == "W_U") return unembed();
    if (n.module == "ln_final" && (n.param == "w" || n.param == "b")) return stored(c_, gpt2_prefix_ + (n.param == "w" ? "ln_f.weight" : "ln_f.bias"));
    if ((n.module == "ln1" || n.module == "ln2") && (n.param == "w" || n.param == "b")) {
      return stored(c_, b + (n.module == "ln1" ? "ln_1." : "ln_2.") + (n.param == "w" ? "weight" : "bias"));
    }
    if (n.module == "attn") {
      static const std::map<std::string, int> part = {{"W_Q", 0}, {"W_K", 1}, {"W_V", 2}, {"b_Q", 0}, {"b_K", 1}, {"b_V", 2}};
      if (part.count(n.param)) {
        bool weight = n.param[0] == 'W';
        auto fused = stored(c_, b + (weight ? "attn.c_attn.weight" : "attn.c_attn.bias"));
        if (!fused) return fused;
        Tensor one = fused->narrow(-1, part.at(n.param) * h, h);  // Conv1D: [d_model, heads·d_head]
        if (!weight) return one.reshape({heads, d_head}).contiguous();
        return one.reshape({h, heads, d_head}).permute({1, 0, 2}).contiguous();
      }
      if (n.param == "W_O") {
        auto w = stored(c_, b + "attn.c_proj.weight");  // [heads·d_head, d_model]
        if (!w) return w;
        return w->reshape({heads, d_head, h}).contiguous();
      }
      if (n.param == "b_O") return stored(c_, b + "attn.c_proj.bias");
    }
    if (n.module == "mlp") {
      static const std::map<std::string, std::string> names = {
          {"W_in", "mlp.c_fc.weight"}, {"b_in", "mlp.c_fc.bias"}, {"W_out", "mlp.c_proj.weight"}, {"b_out", "mlp.c_proj.bias"}};
      if (names.count(n.param)) return stored(c_, b + names.at(n.param));
    }
    return unknown();
  }

  Result<Tensor> read_gated(const ParsedName& n) {
    const std::int64_t heads = a_.num_heads, kv = a_.num_kv_heads, d_head = a_.head_dim;
    std::string b = fmt::format("model.layers.{}.", n.layer);
    if (n.module == "embed" && n.param == "W_E") return stored(c_, "model.embed_tokens.weight");
    if (n.module == "unembed" && n.param == "W_U") return unembed();
    if (n.module == "ln_final" && n.param == "w") return norm("model.norm.weight");
    if (n.module == "ln1" && n.param == "w") return norm(b + "input_layernorm.weight");
    if (n.module == "ln2" && n.param == "w") {
      return norm(b + (a_.sandwich_norms ? "pre_feedforward_layernorm.weight" : "post_attention_layernorm.weight"));
    }
    if (n.module == "attn") {
      std::string a = b + "self_attn.";
      if (n.param == "W_Q") {
        auto w = stored(c_, a + "q_proj.weight");
        if (!w) return w;
        return heads_in(*w, heads, d_head);
      }
      if (n.param == "W_K" || n.param == "W_V") {
        auto w = stored(c_, a + (n.param == "W_K" ? "k_proj.weight" : "v_proj.weight"));
        if (!w) return w;
        return heads_in(*w, kv, d_head);  // one per key-value head, as TransformerLens 4's blocks[L].attn.W_K
      }
      if (n.param == "W_O") {
        auto w = stored(c_, a + "o_proj.weight");  // [d_model, heads·d_head]
        if (!w) return w;
        return w->t().reshape({heads, d_head, w->size(0)}).contiguous();
      }
      if (a_.qkv_bias && (n.param == "b_Q" || n.param == "b_K" || n.param == "b_V")) {
        std::string proj = n.param == "b_Q" ? "q_proj.bias" : n.param == "b_K" ? "k_proj.bias" : "v_proj.bias";
        auto bias = stored(c_, a + proj);
        if (!bias) return bias;
        return bias->reshape({-1, d_head}).contiguous();
      }
    }
    if (n.module == "mlp") {
      static const std::map<std::string, std::string> names = {
          {"W_in", "up_proj.weight"}, {"W_gate", "gate_proj.weight"}, {"W_out", "down_proj.weight"}};
      if (names.count(n.param)) {
        auto w = stored(c_, b + "mlp." + names.at(n.param));
        if (!w) return w;
        return w->t().contiguous();
      }
    }
    return unknown();
  }

  const Architecture& a_;
  const weights::Checkpoint& c_;
  std::string gpt2_prefix_;
};

}  // namespace

std::vector<std::string> transformer_lens_weight_names(const Architecture& a) {
  std::vector<std::string> names = {"embed.W_E"};
  if (a.learned_positions) names.push_back("pos_embed.W_pos");
  for (std::int64_t l = 0; l < a.num_layers; ++l) {
    std::string b = fmt::format("blocks.{}.", l);
    names.push_back(b + "ln1.w");
    if (a.norm == NormKind::layer_norm) names.push_back(b + "ln1.b");
    for (const char* p : {"W_Q", "W_K", "W_V", "W_O"}) names.push_back(b + "attn." + p);
    if (a.fused_conv1d || a.qkv_bias) {
      for (const char* p : {"b_Q", "b_K", "b_V"}) names.push_back(b + "attn." + p);
    }
    if (a.fused_conv1d) names.push_back(b + "attn.b_O");
    names.push_back(b + "ln2.w");
    if (a.norm == NormKind::layer_norm) names.push_back(b + "ln2.b");
    names.push_back(b + "mlp.W_in");
    if (a.gated_mlp) names.push_back(b + "mlp.W_gate");
    names.push_back(b + "mlp.W_out");
    if (a.fused_conv1d) {
      names.push_back(b + "mlp.b_in");
      names.push_back(b + "mlp.b_out");
    }
  }
  names.push_back("ln_final.w");
  if (a.norm == NormKind::layer_norm) names.push_back("ln_final.b");
  names.push_back("unembed.W_U");
  return names;
}

Result<at::Tensor> transformer_lens_weight(const Architecture& architecture, const weights::Checkpoint& checkpoint,
                                           const std::string& name) {
  auto parsed = parse(name);
  Result<Tensor> got = Reader::unknown();
  if (parsed) got = Reader(architecture, checkpoint).read(*parsed);
  if (got || !got.status().message().empty()) return got;
  auto names = transformer_lens_weight_names(architecture);
  std::vector<std::string> shown(names.begin(), names.begin() + std::min<std::ptrdiff_t>(8, static_cast<std::ptrdiff_t>(names.size())));
  return Status(ErrorCode::invalid_request,
                fmt::format("params.names: this model has no weight \"{}\" in TransformerLens' names (e.g. W_E, W_U, {}, ...; "
                            "{} in all)", name, fmt::join(shown, ", "), names.size()));
}

}  // namespace gpubox::modeld
