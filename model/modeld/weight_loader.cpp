#include "model/modeld/weight_loader.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <set>
#include <span>
#include <sys/mman.h>
#include <unistd.h>
#include <utility>

#include "model/modeld/decoder.h"

namespace gpubox::modeld {
namespace {

using at::Tensor;

c10::ScalarType file_scalar_type(weights::DType dtype, bool& ok) {
  ok = true;
  switch (dtype) {
    case weights::DType::F32: return at::kFloat;
    case weights::DType::F16: return at::kHalf;
    case weights::DType::BF16: return at::kBFloat16;
    default: ok = false; return at::kFloat;
  }
}

// Maps a weight's pages into this process now, in one system call per tensor,
// rather than one page fault at a time in the first forward pass: with the
// page cache warm, 1 GB populates in tens of milliseconds where faulting it
// in costs the first forward several hundred (MADV_POPULATE_READ, Linux
// 5.14; on an older kernel MADV_WILLNEED at least starts the reads). Best
// effort: a failure only leaves the faults to the first forward.
void populate(std::span<const std::byte> bytes) {
  if (bytes.empty()) return;
  auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  auto begin = reinterpret_cast<std::uintptr_t>(bytes.data()) & ~(page - 1);
  auto length = reinterpret_cast<std::uintptr_t>(bytes.data()) + bytes.size() - begin;
  if (::madvise(reinterpret_cast<void*>(begin), length, MADV_POPULATE_READ) != 0) {
    ::madvise(reinterpret_cast<void*>(begin), length, MADV_WILLNEED);
  }
}

// Drops this process's mapping of bytes that were copied (cast or moved to a
// device), so that they stop counting in its RSS; the file's pages stay in
// the page cache. REQUIRES: bytes lie in a read-only private file mapping
// (on memory of our own MADV_DONTNEED would zero them). Only whole pages
// inside the tensor: a neighbour used in place keeps its pages (and a
// dropped page would only fault in again, from the file).
void release(std::span<const std::byte> bytes) {
  auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  auto begin = (reinterpret_cast<std::uintptr_t>(bytes.data()) + page - 1) & ~(page - 1);
  auto end = (reinterpret_cast<std::uintptr_t>(bytes.data()) + bytes.size()) & ~(page - 1);
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

std::string shape_text(const std::vector<std::int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

// Binds checkpoint tensors by name, checking shapes; remembers what it used.
class WeightBinder {
 public:
  WeightBinder(const weights::Checkpoint& checkpoint, c10::ScalarType dtype, c10::Device device, LoadProgress& progress)
      : checkpoint_(checkpoint), dtype_(dtype), device_(device), progress_(progress) {}

  // The tensor named name with exactly shape, as dtype on device. A tensor
  // used in place has its pages mapped now when every forward reads all of
  // it; one that is not (an untied embedding, of which a forward reads the
  // rows it looks up; a tied copy, only checked) faults in as it is used.
  Result<Tensor> take(const std::string& name, std::vector<std::int64_t> shape, bool as_float32 = false,
                      bool read_whole = true) {
    auto found = checkpoint_.find(name);
    if (!found) return Status(ErrorCode::invalid_request, fmt::format("tensor {} is missing from the checkpoint", name));
    const weights::TensorEntry& entry = *found->entry;
    if (entry.shape != shape) {
      return Status(ErrorCode::invalid_request, fmt::format("{}: tensor {} has shape {}, the architecture expects {}",
                                                            found->file->path(), name, shape_text(entry.shape),
                                                            shape_text(shape)));
    }
    bool known = false;
    c10::ScalarType stored = file_scalar_type(entry.dtype, known);
    if (!known) {
      return Status(ErrorCode::invalid_request, fmt::format("{}: tensor {} has dtype {}; weights must be F32, F16 or BF16",
                                                            found->file->path(), name, weights::dtype_name(entry.dtype)));
    }
    auto bytes = found->file->bytes(entry);
    // The mapping is read-only: the decoder never writes a weight in place.
    Tensor mapped = at::from_blob(const_cast<std::byte*>(bytes.data()), shape, at::TensorOptions().dtype(stored));
    c10::ScalarType wanted = as_float32 ? at::kFloat : dtype_;
    Tensor bound = mapped;
    if (stored != wanted || !device_.is_cpu()) {
      bound = mapped.to(device_, wanted);
      if (found->file->mapped()) release(bytes);  // copied: the mapped bytes are not read again
    } else if (read_whole) {
      populate(bytes);  // used in place: every forward reads all of it
    }
    used_.insert(name);
    held_bytes_ += static_cast<std::uint64_t>(bound.nbytes());
    held_elements_ += static_cast<std::uint64_t>(bound.numel());
    progress_.bytes_loaded += entry.size;
    progress_.tensors_loaded += 1;
    return bound;
  }
  // A tensor that only some checkpoints have (lm_head when embeddings are tied).
  bool has(const std::string& name) const { return checkpoint_.find(name).has_value(); }

  std::vector<std::string> unused() const {
    std::vector<std::string> out;
    for (const auto& name : checkpoint_.names()) {
      if (!used_.count(name)) out.push_back(name);
    }
    return out;
  }
  std::uint64_t held_bytes() const { return held_bytes_; }
  std::uint64_t held_elements() const { return held_elements_; }

 private:
  const weights::Checkpoint& checkpoint_;
  c10::ScalarType dtype_;
  c10::Device device_;
  LoadProgress& progress_;
  std::set<std::string> used_;
  std::uint64_t held_bytes_ = 0;
  std::uint64_t held_elements_ = 0;
};

// Binds a Result<Tensor> to a field or returns its error from the enclosing function.
#define GPUBOX_BIND(field, expr)            \
  do {                                      \
    auto bound_ = (expr);                   \
    if (!bound_) return bound_.status();    \
    field = std::move(bound_.value());      \
  } while (0)

}  // namespace

Result<BoundWeights> bind_weights(const Architecture& arch, const weights::Checkpoint& checkpoint,
                                  c10::ScalarType dtype, c10::Device device, LoadProgress& progress) {
  BoundWeights w;
  progress.bytes_total = checkpoint.total_bytes();
  progress.tensors_total = checkpoint.names().size();
  WeightBinder bind(checkpoint, dtype, device, progress);
  const std::int64_t h = arch.hidden_size, q_out = arch.num_heads * arch.head_dim, kv_out = arch.num_kv_heads * arch.head_dim;
  const std::int64_t inner = arch.intermediate_size;
  bool one_plus = arch.norm == NormKind::rms_norm_one_plus;
  auto norm_weight = [&](const std::string& name, Tensor& into, std::int64_t size) -> Status {
    GPUBOX_BIND(into, bind.take(name, {size}, one_plus));
    if (one_plus) into = into + 1.0;  // Gemma's (1 + w), in fp32 as transformers computes it
    return Status::ok();
  };
  if (arch.name == "gpt2") {
    std::string p = bind.has("transformer.wte.weight") ? "transformer." : "";
    GPUBOX_BIND(w.embed, bind.take(p + "wte.weight", {arch.vocab_size, h}));
    GPUBOX_BIND(w.pos_embed, bind.take(p + "wpe.weight", {arch.max_positions, h}));
    GPUBOX_BIND(w.final_w, bind.take(p + "ln_f.weight", {h}));
    GPUBOX_BIND(w.final_b, bind.take(p + "ln_f.bias", {h}));
    for (std::int64_t i = 0; i < arch.num_layers; ++i) {
      LayerWeights l;
      std::string b = fmt::format("{}h.{}.", p, i);
      GPUBOX_BIND(l.ln1_w, bind.take(b + "ln_1.weight", {h}));
      GPUBOX_BIND(l.ln1_b, bind.take(b + "ln_1.bias", {h}));
      GPUBOX_BIND(l.ln2_w, bind.take(b + "ln_2.weight", {h}));
      GPUBOX_BIND(l.ln2_b, bind.take(b + "ln_2.bias", {h}));
      GPUBOX_BIND(l.qkv_w, bind.take(b + "attn.c_attn.weight", {h, 3 * h}));
      GPUBOX_BIND(l.qkv_b, bind.take(b + "attn.c_attn.bias", {3 * h}));
      GPUBOX_BIND(l.o_w, bind.take(b + "attn.c_proj.weight", {h, h}));
      GPUBOX_BIND(l.o_b, bind.take(b + "attn.c_proj.bias", {h}));
      GPUBOX_BIND(l.fc_w, bind.take(b + "mlp.c_fc.weight", {h, inner}));
      GPUBOX_BIND(l.fc_b, bind.take(b + "mlp.c_fc.bias", {inner}));
      GPUBOX_BIND(l.proj_w, bind.take(b + "mlp.c_proj.weight", {inner, h}));
      GPUBOX_BIND(l.proj_b, bind.take(b + "mlp.c_proj.bias", {h}));
      w.layers.push_back(std::move(l));
    }
  } else {
    GPUBOX_BIND(w.embed, bind.take("model.embed_tokens.weight", {arch.vocab_size, h}, false, arch.tie_embeddings));
    if (Status s = norm_weight("model.norm.weight", w.final_w, h); !s) return s;
    for (std::int64_t i = 0; i < arch.num_layers; ++i) {
      LayerWeights l;
      std::string b = fmt::format("model.layers.{}.", i);
      if (Status s = norm_weight(b + "input_layernorm.weight", l.ln1_w, h); !s) return s;
      if (arch.sandwich_norms) {
        if (Status s = norm_weight(b + "post_attention_layernorm.weight", l.post_attn_w, h); !s) return s;
        if (Status s = norm_weight(b + "pre_feedforward_layernorm.weight", l.ln2_w, h); !s) return s;
        if (Status s = norm_weight(b + "post_feedforward_layernorm.weight", l.post_mlp_w, h); !s) return s;
      } else if (Status s = norm_weight(b + "post_attention_layernorm.weight", l.ln2_w, h); !s) {
        return s;
      }
      std::string a = b + "self_attn.";
      if (arch.qk_norm) {
        if (Status s = norm_weight(a + "q_norm.weight", l.q_norm_w, arch.head_dim); !s) return s;
        if (Status s = norm_weight(a + "k_norm.weight", l.k_norm_w, arch.head_dim); !s) return s;
      }
      GPUBOX_BIND(l.q_w, bind.take(a + "q_proj.weight", {q_out, h}));
      GPUBOX_BIND(l.k_w, bind.take(a + "k_proj.weight", {kv_out, h}));
      GPUBOX_BIND(l.v_w, bind.take(a + "v_proj.weight", {kv_out, h}));
      GPUBOX_BIND(l.o_w, bind.take(a + "o_proj.weight", {h, q_out}));
      if (arch.qkv_bias) {
        GPUBOX_BIND(l.q_b, bind.take(a + "q_proj.bias", {q_out}));
        GPUBOX_BIND(l.k_b, bind.take(a + "k_proj.bias", {kv_out}));
        GPUBOX_BIND(l.v_b, bind.take(a + "v_proj.bias", {kv_out}));
      }
      if (arch.o_bias) GPUBOX_BIND(l.o_b, bind.take(a + "o_proj.bias", {h}));
      std::string m = b + "mlp.";
      GPUBOX_BIND(l.gate_w, bind.take(m + "gate_proj.weight", {inner, h}));
      GPUBOX_BIND(l.up_w, bind.take(m + "up_proj.weight", {inner, h}));
      GPUBOX_BIND(l.down_w, bind.take(m + "down_proj.weight", {h, inner}));
      if (arch.mlp_bias) {
        GPUBOX_BIND(l.gate_b, bind.take(m + "gate_proj.bias", {inner}));
        GPUBOX_BIND(l.up_b, bind.take(m + "up_proj.bias", {inner}));
        GPUBOX_BIND(l.down_b, bind.take(m + "down_proj.bias", {h}));
      }
      w.layers.push_back(std::move(l));
    }
  }
  if (!arch.tie_embeddings || bind.has("lm_head.weight")) {
    if (arch.tie_embeddings) {
      // A tied copy some files carry: checked, and the embedding is used.
      if (auto tied = bind.take("lm_head.weight", {arch.vocab_size, h}, false, false); !tied) return tied.status();
    } else {
      GPUBOX_BIND(w.lm_head, bind.take("lm_head.weight", {arch.vocab_size, h}));
    }
  }
  if (!w.lm_head.defined()) w.lm_head = w.embed;
  w.held_bytes = bind.held_bytes();
  w.parameters = bind.held_elements();
  w.unexpected = bind.unused();
  return w;
}

}  // namespace gpubox::modeld
