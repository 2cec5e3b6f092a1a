#include "model/modeld/decoder/weight_loader.h"

#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <algorithm>
#include <cstring>
#include <optional>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <set>
#include <span>
#include <sys/mman.h>
#include <unistd.h>
#include <utility>

#include "model/modeld/decoder/decoder.h"

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

// Host tensors to a GPU through two pinned staging buffers: while one
// buffer's bytes cross PCIe (asynchronously, on the device's current stream)
// the CPU copies the next bytes of the mapped file into the other, which
// faults them in (the copy is the read). A pageable copy would block and be
// staged by the driver. One loading thread; finish() before the tensors are used.
class PinnedUploader {
 public:
  explicit PinnedUploader(c10::Device device) : device_(device) {}

  // host (contiguous, on the CPU) on the device, of the same dtype and shape;
  // host's bytes have been read when this returns, the copy may still be in flight.
  Tensor upload(const Tensor& host) {
    auto bytes = static_cast<std::int64_t>(host.nbytes());
    Tensor target = at::empty({bytes}, at::TensorOptions().dtype(at::kByte).device(device_));
    const auto* source = static_cast<const std::byte*>(host.data_ptr());
    for (std::int64_t offset = 0; offset < bytes; offset += kBufferBytes) {
      std::int64_t size = std::min(kBufferBytes, bytes - offset);
      Slot& slot = next_slot();
      std::memcpy(slot.buffer.data_ptr(), source + offset, static_cast<std::size_t>(size));
      target.narrow(0, offset, size).copy_(slot.buffer.narrow(0, 0, size), /*non_blocking=*/true);
      slot.copied.emplace(device_.type());
      slot.copied->record(c10::impl::getDeviceGuardImpl(device_.type())->getStream(device_));
    }
    return target.view(host.scalar_type()).view(host.sizes());
  }

  // Waits for every copy in flight.
  void finish() {
    for (Slot& slot : slots_) {
      if (slot.copied) slot.copied->synchronize();
      slot.copied.reset();
    }
  }

 private:
  static constexpr std::int64_t kBufferBytes = std::int64_t{64} << 20;
  struct Slot {
    Tensor buffer;                    // pinned
    std::optional<c10::Event> copied;  // its last copy to the device
  };
  // The other buffer, once its last copy has crossed.
  Slot& next_slot() {
    Slot& slot = slots_[turn_++ % 2];
    if (!slot.buffer.defined()) {
      slot.buffer = at::empty({kBufferBytes}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
    }
    if (slot.copied) slot.copied->synchronize();
    return slot;
  }

  c10::Device device_;
  Slot slots_[2];
  std::size_t turn_ = 0;
};

// A part of a tensor along one axis (a rank's rows or columns); axis -1: all of it.
struct Slice {
  int axis = -1;
  std::int64_t start = 0, length = 0;
  Tensor of(const Tensor& whole) const { return axis < 0 ? whole : whole.narrow(axis, start, length); }
};

// One tensor (or its slice) of a stack take_stacked builds.
struct StackedPart {
  std::string name;
  std::vector<std::int64_t> shape;  // the whole tensor's, as the file must hold it
  Slice slice = {};
};

// Binds checkpoint tensors by name, checking shapes; remembers what it used.
class WeightBinder {
 public:
  WeightBinder(const weights::Checkpoint& checkpoint, c10::ScalarType dtype, c10::Device device, LoadProgress& progress,
               const Shard& shard)
      : checkpoint_(checkpoint), dtype_(dtype), device_(device), progress_(progress), shard_(shard) {
    if (!device.is_cpu()) uploader_.emplace(device);
  }

  // The tensor named name with exactly shape, or its slice along one axis
  // (a rank's part), as dtype on device. A tensor (or slice) of the model's
  // dtype that lies contiguous in the mapped file is used in place, its pages
  // mapped now when every forward reads all of it; one that is not (an untied
  // embedding, of which a forward reads the rows it looks up; a tied copy,
  // only checked) faults in as it is used. Without a slice every rank of a
  // split holds the tensor whole (its elements counted by rank 0 alone).
  Result<Tensor> take(const std::string& name, std::vector<std::int64_t> shape, bool as_float32 = false,
                      bool read_whole = true, const Slice& slice = {}) {
    auto found = locate(name, shape);
    if (!found) return found.status();
    c10::ScalarType wanted = as_float32 ? at::kFloat : dtype_;
    Tensor part = slice.of(found->mapped);
    Tensor bound = part;
    if (part.scalar_type() != wanted || !device_.is_cpu() || !part.is_contiguous()) {
      Tensor host = part.contiguous();  // a slice's own bytes only
      bound = uploader_ ? uploader_->upload(host).to(wanted) : host.to(wanted);  // cast on the device
      found->release();  // copied: the mapped bytes are not read again
    } else if (read_whole) {
      populate({static_cast<const std::byte*>(part.data_ptr()), part.nbytes()});  // used in place: every forward reads all of it
    }
    count(name, file_share(*found, part, slice), bound, slice.axis < 0);
    return bound;
  }

  // Tensors (or slices along one axis) stacked along axis into one tensor of
  // the model's dtype on the device (q, k and v, or gate and up: one product
  // where there were several; a rank's columns of GPT-2's c_attn). The parts
  // are copied, and their mapped pages dropped.
  Result<Tensor> take_stacked(const std::vector<StackedPart>& parts, int axis = 0) {
    std::vector<Located> located;
    std::vector<Tensor> pieces;
    std::int64_t rows = 0;
    for (const auto& part : parts) {
      auto found = locate(part.name, part.shape);
      if (!found) return found.status();
      pieces.push_back(part.slice.of(found->mapped));
      rows += pieces.back().size(axis);
      located.push_back(std::move(*found));
    }
    std::vector<std::int64_t> shape = pieces[0].sizes().vec();
    shape[static_cast<std::size_t>(axis)] = rows;
    Tensor stacked = at::empty(shape, at::TensorOptions().dtype(dtype_).device(device_));
    std::int64_t offset = 0;
    for (std::size_t i = 0; i < located.size(); ++i) {
      std::int64_t part_rows = pieces[i].size(axis);
      Tensor host = pieces[i].contiguous();
      stacked.narrow(axis, offset, part_rows).copy_(uploader_ ? uploader_->upload(host) : host);
      offset += part_rows;
      located[i].release();
      count(parts[i].name, file_share(located[i], pieces[i], parts[i].slice), Tensor(), false);
    }
    held_bytes_ += static_cast<std::uint64_t>(stacked.nbytes());
    held_elements_ += static_cast<std::uint64_t>(stacked.numel());
    return stacked;
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
  // Waits for the copies to the device still in flight.
  void finish() {
    if (uploader_) uploader_->finish();
  }
  std::uint64_t held_bytes() const { return held_bytes_; }
  std::uint64_t held_elements() const { return held_elements_; }

 private:
  // A checked tensor of the checkpoint, still in its file (a view of the mapping).
  struct Located {
    Tensor mapped;
    std::span<const std::byte> bytes;
    bool file_mapped = false;
    void release() const {
      if (file_mapped) modeld::release(bytes);
    }
  };

  // The tensor named name, checked to have exactly shape and a weight dtype; an error names it and its file.
  Result<Located> locate(const std::string& name, const std::vector<std::int64_t>& shape) const {
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
    return Located{mapped, bytes, found->file->mapped()};
  }

  // The file bytes a rank's part stands for in the progress: its slice's, or
  // a whole tensor's share (every rank reads it) so the ranks' sum is the file's.
  std::size_t file_share(const Located& found, const Tensor& part, const Slice& slice) const {
    if (slice.axis >= 0) return static_cast<std::size_t>(part.nbytes());
    return found.bytes.size() / static_cast<std::size_t>(shard_.ranks);
  }

  // Records a tensor as used and loaded; bound (when defined) is what is held
  // of it. whole: every rank of a split holds it, so only rank 0 counts its elements.
  void count(const std::string& name, std::size_t file_bytes, const Tensor& bound, bool whole) {
    if (used_.insert(name).second) progress_.tensors_loaded += 1;  // GPT-2's c_attn comes in three slices
    if (bound.defined()) {
      held_bytes_ += static_cast<std::uint64_t>(bound.nbytes());
      if (!whole || shard_.rank == 0) held_elements_ += static_cast<std::uint64_t>(bound.numel());
    }
    progress_.bytes_loaded += file_bytes;
  }

  const weights::Checkpoint& checkpoint_;
  c10::ScalarType dtype_;
  c10::Device device_;
  LoadProgress& progress_;
  Shard shard_;
  std::optional<PinnedUploader> uploader_;  // on a GPU
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

// The single projections as views of their stacks (what model.weights and the checks read).
void split_qkv(LayerWeights& l, std::int64_t q_out, std::int64_t kv_out) {
  auto part = [](const Tensor& stacked, std::int64_t start, std::int64_t rows) {
    return stacked.defined() ? stacked.narrow(0, start, rows) : Tensor();
  };
  l.q_w = part(l.qkv_w, 0, q_out), l.k_w = part(l.qkv_w, q_out, kv_out), l.v_w = part(l.qkv_w, q_out + kv_out, kv_out);
  l.q_b = part(l.qkv_b, 0, q_out), l.k_b = part(l.qkv_b, q_out, kv_out), l.v_b = part(l.qkv_b, q_out + kv_out, kv_out);
}

void split_gate_up(LayerWeights& l, std::int64_t inner) {
  l.gate_w = l.gate_up_w.narrow(0, 0, inner), l.up_w = l.gate_up_w.narrow(0, inner, inner);
  if (l.gate_up_b.defined()) l.gate_b = l.gate_up_b.narrow(0, 0, inner), l.up_b = l.gate_up_b.narrow(0, inner, inner);
}

}  // namespace

Architecture rank_architecture(const Architecture& whole, const Shard& shard) {
  Architecture arch = whole;
  arch.num_heads = shard.length(whole.num_heads);
  arch.num_kv_heads = shard.length(whole.num_kv_heads);
  arch.intermediate_size = shard.length(whole.intermediate_size);
  arch.vocab_size = shard.vocab_length(whole.vocab_size);
  return arch;
}

Result<BoundWeights> bind_weights(const Architecture& arch, const weights::Checkpoint& checkpoint,
                                  c10::ScalarType dtype, c10::Device device, LoadProgress& progress, const Shard& shard) {
  BoundWeights w;
  if (shard.rank == 0) {
    progress.bytes_total = checkpoint.total_bytes();
    progress.tensors_total = checkpoint.names().size() * static_cast<std::uint64_t>(shard.ranks);
  }
  WeightBinder bind(checkpoint, dtype, device, progress, shard);
  const std::int64_t h = arch.hidden_size, d = arch.head_dim, q_out = arch.num_heads * d, kv_out = arch.num_kv_heads * d;
  const std::int64_t inner = arch.intermediate_size;
  const bool split = shard.ranks > 1;
  // This rank's part of count units of width along axis, starting at offset (in units of width).
  auto part = [&](int axis, std::int64_t count, std::int64_t width = 1, std::int64_t offset = 0) {
    return split ? Slice{axis, offset + shard.start(count) * width, shard.length(count) * width} : Slice{};
  };
  const Slice vocab = split ? Slice{0, shard.vocab_start(arch.vocab_size), shard.vocab_length(arch.vocab_size)} : Slice{};
  // Per layer: query rows, key and value rows, inner units; in a Linear's [out, in] layout.
  const Slice q_rows = part(0, arch.num_heads, d), kv_rows = part(0, arch.num_kv_heads, d), inner_rows = part(0, inner);
  bool one_plus = arch.norm == NormKind::rms_norm_one_plus;
  auto norm_weight = [&](const std::string& name, Tensor& into, std::int64_t size) -> Status {
    GPUBOX_BIND(into, bind.take(name, {size}, one_plus));
    if (one_plus) into = into + 1.0;  // Gemma's (1 + w), in fp32 as transformers computes it
    return Status::ok();
  };
  if (arch.name == "gpt2") {
    std::string p = bind.has("transformer.wte.weight") ? "transformer." : "";
    GPUBOX_BIND(w.embed, bind.take(p + "wte.weight", {arch.vocab_size, h}, false, true, vocab));
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
      // Conv1D layout [in, out]: c_attn's q, k and v columns, this rank's heads of each.
      if (split) {
        std::vector<StackedPart> columns, biases;
        for (std::int64_t which = 0; which < 3; ++which) {
          columns.push_back({b + "attn.c_attn.weight", {h, 3 * h}, part(1, arch.num_heads, d, which * h)});
          biases.push_back({b + "attn.c_attn.bias", {3 * h}, part(0, arch.num_heads, d, which * h)});
        }
        GPUBOX_BIND(l.qkv_w, bind.take_stacked(columns, 1));
        GPUBOX_BIND(l.qkv_b, bind.take_stacked(biases));
      } else {
        GPUBOX_BIND(l.qkv_w, bind.take(b + "attn.c_attn.weight", {h, 3 * h}));
        GPUBOX_BIND(l.qkv_b, bind.take(b + "attn.c_attn.bias", {3 * h}));
      }
      GPUBOX_BIND(l.o_w, bind.take(b + "attn.c_proj.weight", {h, h}, false, true, q_rows));
      GPUBOX_BIND(l.o_b, bind.take(b + "attn.c_proj.bias", {h}));
      GPUBOX_BIND(l.fc_w, bind.take(b + "mlp.c_fc.weight", {h, inner}, false, true, part(1, inner)));
      GPUBOX_BIND(l.fc_b, bind.take(b + "mlp.c_fc.bias", {inner}, false, true, inner_rows));
      GPUBOX_BIND(l.proj_w, bind.take(b + "mlp.c_proj.weight", {inner, h}, false, true, inner_rows));
      GPUBOX_BIND(l.proj_b, bind.take(b + "mlp.c_proj.bias", {h}));
      w.layers.push_back(std::move(l));
    }
  } else {
    GPUBOX_BIND(w.embed, bind.take("model.embed_tokens.weight", {arch.vocab_size, h}, false, arch.tie_embeddings, vocab));
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
      // q, k and v as one product, and gate and up as another (fewer, larger
      // kernels per token); the single names stay bound as views of the stack.
      GPUBOX_BIND(l.qkv_w, bind.take_stacked({{a + "q_proj.weight", {q_out, h}, q_rows},
                                              {a + "k_proj.weight", {kv_out, h}, kv_rows},
                                              {a + "v_proj.weight", {kv_out, h}, kv_rows}}));
      GPUBOX_BIND(l.o_w, bind.take(a + "o_proj.weight", {h, q_out}, false, true, part(1, arch.num_heads, d)));
      if (arch.qkv_bias) {
        GPUBOX_BIND(l.qkv_b, bind.take_stacked({{a + "q_proj.bias", {q_out}, q_rows},
                                                {a + "k_proj.bias", {kv_out}, kv_rows},
                                                {a + "v_proj.bias", {kv_out}, kv_rows}}));
      }
      split_qkv(l, q_rows.axis < 0 ? q_out : q_rows.length, kv_rows.axis < 0 ? kv_out : kv_rows.length);
      if (arch.o_bias) GPUBOX_BIND(l.o_b, bind.take(a + "o_proj.bias", {h}));
      std::string m = b + "mlp.";
      GPUBOX_BIND(l.gate_up_w, bind.take_stacked({{m + "gate_proj.weight", {inner, h}, inner_rows},
                                                  {m + "up_proj.weight", {inner, h}, inner_rows}}));
      GPUBOX_BIND(l.down_w, bind.take(m + "down_proj.weight", {h, inner}, false, true, part(1, inner)));
      if (arch.mlp_bias) {
        GPUBOX_BIND(l.gate_up_b, bind.take_stacked({{m + "gate_proj.bias", {inner}, inner_rows},
                                                    {m + "up_proj.bias", {inner}, inner_rows}}));
        GPUBOX_BIND(l.down_b, bind.take(m + "down_proj.bias", {h}));
      }
      split_gate_up(l, inner_rows.axis < 0 ? inner : inner_rows.length);
      w.layers.push_back(std::move(l));
    }
  }
  if (!arch.tie_embeddings || bind.has("lm_head.weight")) {
    if (arch.tie_embeddings) {
      // A tied copy some files carry: checked, and the embedding is used.
      if (auto tied = bind.take("lm_head.weight", {arch.vocab_size, h}, false, false, vocab); !tied) return tied.status();
    } else {
      GPUBOX_BIND(w.lm_head, bind.take("lm_head.weight", {arch.vocab_size, h}, false, true, vocab));
    }
  }
  if (!w.lm_head.defined()) w.lm_head = w.embed;
  bind.finish();
  w.held_bytes = bind.held_bytes();
  w.parameters = bind.held_elements();
  w.unexpected = bind.unused();
  return w;
}

}  // namespace gpubox::modeld
