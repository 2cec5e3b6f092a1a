// `gpubox weights FILE|DIR [--tensor NAME [--indices I...]] [--json]`: what a
// safetensors file or a Hugging Face model directory holds, read through the
// same validating parser modeld uses (model/weights/), with no sandbox.
// Nothing in the file is ever executed: pickle weights are refused by name.
#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string_view>

#include <nlohmann/json.hpp>

#include "host/cli/cli.h"
#include "model/weights/checkpoint.h"
#include "model/weights/safetensors.h"
#include "base/sha256.h"
#include "base/terminal_text.h"

namespace gpubox::host::cli {
namespace {

using weights::Checkpoint;
using weights::SafetensorsFile;
using weights::TensorEntry;

constexpr char kWeightsUsage[] =
    "usage: gpubox weights FILE|DIR [--json]\n"
    "       gpubox weights FILE|DIR --tensor NAME [--indices I...] [--json]\n"
    "Lists the tensors of a .safetensors file, or of a model directory (model.safetensors, or the\n"
    "shards model.safetensors.index.json names): name, dtype, shape, bytes and the sha256 of the data.\n"
    "--tensor NAME: that tensor's summary (elements, min, max, mean); --indices: its values at\n"
    "those flat (row-major) indices. Every file is validated before use; pickle files (.bin) are refused.\n"
    "exit codes: 0 ok, 1 a file failed validation, 2 usage error, no such file, tensor or index.\n";

// One tensor of the file or checkpoint, with the file that holds it.
struct Item {
  const SafetensorsFile* file;
  const TensorEntry* entry;
};

// The opened FILE or DIR: one file, or a checkpoint of several.
struct Opened {
  std::unique_ptr<SafetensorsFile> single;
  std::unique_ptr<Checkpoint> checkpoint;

  std::vector<const SafetensorsFile*> files() const {
    if (single) return {single.get()};
    std::vector<const SafetensorsFile*> all;
    for (const auto& file : checkpoint->files()) all.push_back(file.get());
    return all;
  }
  std::vector<Item> items() const {
    std::vector<Item> all;
    for (const auto* file : files()) {
      for (const auto& entry : file->tensors()) all.push_back({file, &entry});
    }
    return all;
  }
  std::optional<Item> find(std::string_view name) const {
    if (single) {
      const TensorEntry* entry = single->find(name);
      if (!entry) return std::nullopt;
      return Item{single.get(), entry};
    }
    auto located = checkpoint->find(name);
    if (!located) return std::nullopt;
    return Item{located->file, located->entry};
  }
};

bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

// Pickle formats, refused by name before anything reads them.
bool is_pickle_name(std::string_view path) {
  for (const char* pickle : {".bin", ".pt", ".pth", ".pkl", ".ckpt"}) {
    if (ends_with(path, pickle)) return true;
  }
  return false;
}

Result<Opened> open_weights(const std::string& path) {
  if (ends_with(path, ".json")) {
    return Status(ErrorCode::not_found, path + ": a JSON file; give the model directory it is in, or a .safetensors file");
  }
  Opened opened;
  struct stat info {};
  if (::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode)) {
    auto checkpoint = Checkpoint::open_dir(path);
    if (!checkpoint) return checkpoint.status();
    opened.checkpoint = std::move(checkpoint).value();
  } else {
    auto file = SafetensorsFile::open(path);
    if (!file) return file.status();
    opened.single = std::move(file).value();
  }
  return opened;
}

std::string sha256_of(std::span<const std::byte> bytes) {
  Sha256 hash;
  hash.update(bytes.data(), bytes.size());
  return hash.hex_digest();
}

std::string shape_text(const TensorEntry& entry) {
  std::string text = "[";
  for (std::size_t i = 0; i < entry.shape.size(); ++i) text += (i ? ", " : "") + std::to_string(entry.shape[i]);
  return text + "]";
}

nlohmann::json tensor_json(const Item& item) {
  const TensorEntry& entry = *item.entry;
  return {{"name", entry.name},
          {"dtype", weights::dtype_name(entry.dtype)},
          {"shape", entry.shape},
          {"bytes", entry.size},
          {"offset", entry.offset},
          {"file", item.file->path()},
          {"sha256", sha256_of(item.file->bytes(entry))}};
}

// An element as JSON: integers and booleans exact, non-finite floats as text.
nlohmann::json element_json(const TensorEntry& entry, std::span<const std::byte> bytes, std::uint64_t index) {
  using weights::DType;
  std::string text = weights::element_as_text(entry, bytes, index);
  if (entry.dtype == DType::BOOL) return text == "true";
  if (entry.dtype == DType::U64) return std::stoull(text);
  if (!weights::dtype_is_float(entry.dtype)) return std::stoll(text);
  double value = weights::element_as_double(entry, bytes, index);
  if (!std::isfinite(value)) return text;
  return value;
}

int list(const Opened& opened, const std::string& path, bool as_json) {
  auto items = opened.items();
  if (as_json) {
    nlohmann::json out = {{"path", path}, {"files", nlohmann::json::array()}, {"tensors", nlohmann::json::array()}};
    std::uint64_t total = 0;
    for (const auto* file : opened.files()) {
      out["files"].push_back({{"path", file->path()},
                              {"tensors", file->tensors().size()},
                              {"data_bytes", file->data_bytes()},
                              {"metadata", file->metadata()}});
      total += file->data_bytes();
    }
    for (const auto& item : items) out["tensors"].push_back(tensor_json(item));
    out["total_bytes"] = total;
    std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return kExitOk;
  }
  std::size_t name_width = 4, shape_width = 5;
  for (const auto& item : items) {
    name_width = std::max(name_width, escape_for_terminal(item.entry->name).size());
    shape_width = std::max(shape_width, shape_text(*item.entry).size());
  }
  const SafetensorsFile* current = nullptr;
  for (const auto& item : items) {
    if (item.file != current) {
      current = item.file;
      std::printf("%s%s: %zu tensors, %llu bytes\n", current == items.front().file ? "" : "\n",
                  escape_for_terminal(current->path()).c_str(),
                  current->tensors().size(), static_cast<unsigned long long>(current->data_bytes()));
      std::printf("%-*s  %-7s  %-*s  %12s  %s\n", static_cast<int>(name_width), "NAME", "DTYPE",
                  static_cast<int>(shape_width), "SHAPE", "BYTES", "SHA256");
    }
    const TensorEntry& entry = *item.entry;
    // A file's header names its tensors (a file that came out of a sandbox): nothing in them acts on the terminal.
    std::printf("%-*s  %-7s  %-*s  %12llu  %s\n", static_cast<int>(name_width), escape_for_terminal(entry.name).c_str(),
                std::string(weights::dtype_name(entry.dtype)).c_str(), static_cast<int>(shape_width),
                shape_text(entry).c_str(), static_cast<unsigned long long>(entry.size),
                sha256_of(item.file->bytes(entry)).c_str());
  }
  if (items.empty()) std::printf("no tensors\n");
  return kExitOk;
}

// Min, max and mean over the elements that are not NaN, and how many are.
nlohmann::json statistics(const TensorEntry& entry, std::span<const std::byte> bytes) {
  double low = std::numeric_limits<double>::infinity(), high = -low, sum = 0;
  std::uint64_t nan = 0, count = entry.element_count();
  for (std::uint64_t i = 0; i < count; ++i) {
    double value = weights::element_as_double(entry, bytes, i);
    if (std::isnan(value)) {
      ++nan;
      continue;
    }
    low = std::min(low, value);
    high = std::max(high, value);
    sum += value;
  }
  nlohmann::json out = {{"elements", count}, {"nan_count", nan}};
  if (count > nan) {
    auto number = [](double value) -> nlohmann::json {
      if (std::isfinite(value)) return value;
      return std::isnan(value) ? "nan" : value > 0 ? "inf" : "-inf";
    };
    out["min"] = number(low);
    out["max"] = number(high);
    out["mean"] = number(sum / static_cast<double>(count - nan));
  }
  return out;
}

int show_tensor(const Opened& opened, const std::string& name, const std::vector<std::string>& index_texts,
                bool as_json) {
  auto item = opened.find(name);
  if (!item) return fail("weights", Status(ErrorCode::not_found, "no tensor named '" + name + "'"), kExitUsage);
  const TensorEntry& entry = *item->entry;
  auto bytes = item->file->bytes(entry);
  std::vector<std::uint64_t> indices;
  for (const auto& text : index_texts) {
    std::uint64_t index = 0;
    bool digits = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos && text.size() <= 19;
    if (digits) index = std::stoull(text);
    if (!digits || index >= entry.element_count()) {
      return fail("weights",
                  Status(ErrorCode::invalid_request, "index " + text + " is out of range for tensor '" + name + "' (" +
                                                         std::to_string(entry.element_count()) + " elements)"),
                  kExitUsage);
    }
    indices.push_back(index);
  }
  nlohmann::json out = tensor_json(*item);
  if (indices.empty()) {
    out.update(statistics(entry, bytes));
  } else {
    out["values"] = nlohmann::json::array();
    for (auto index : indices) out["values"].push_back({{"index", index}, {"value", element_json(entry, bytes, index)}});
  }
  if (as_json) {
    std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return kExitOk;
  }
  if (!indices.empty()) {
    for (auto index : indices) {
      std::printf("%s[%llu] = %s\n", escape_for_terminal(name).c_str(), static_cast<unsigned long long>(index),
                  weights::element_as_text(entry, bytes, index).c_str());
    }
    return kExitOk;
  }
  for (const char* key : {"name", "file", "dtype", "shape", "elements", "bytes", "offset", "sha256", "min", "max",
                          "mean", "nan_count"}) {
    if (!out.contains(key)) continue;
    const auto& value = out[key];
    std::string text = value.is_string() ? value.get<std::string>() : key == std::string_view("shape") ? shape_text(entry)
                                                                                                       : value.dump();
    std::printf("%-10s %s\n", (std::string(key) + ":").c_str(), escape_for_terminal(text).c_str());
  }
  return kExitOk;
}

}  // namespace

int run_weights(const std::vector<std::string>& raw, const Global& global) {
  // --indices takes every argument after it up to the next option.
  std::vector<std::string> args, index_texts;
  bool has_indices = false;
  for (std::size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] == "--indices" || raw[i].rfind("--indices=", 0) == 0) {
      has_indices = true;
      if (raw[i] != "--indices") index_texts.push_back(raw[i].substr(10));
      while (i + 1 < raw.size() && raw[i + 1].rfind("--", 0) != 0) index_texts.push_back(raw[++i]);
      continue;
    }
    args.push_back(raw[i]);
  }
  auto parsed = parse_args(args, {"--tensor"}, {});
  if (!parsed) return fail_usage("weights", parsed.status());
  if (parsed->flag("--help")) return show_usage(kWeightsUsage);
  if (parsed->positional.size() != 1) return fail_usage("weights", "expected one FILE or DIR");
  auto tensor = parsed->last("--tensor");
  if (has_indices && !tensor) return fail_usage("weights", "--indices needs --tensor NAME");
  if (has_indices && index_texts.empty()) return fail_usage("weights", "--indices: expected at least one index");
  bool as_json = global.json || parsed->flag("--json");

  const std::string& path = parsed->positional[0];
  if (is_pickle_name(path)) {
    return fail("weights", path + ": a pickle file, which gpubox never reads (unpickling can run code); convert it "
                                  "to safetensors", kExitUsage);
  }
  auto opened = open_weights(path);
  if (!opened) {
    // A file that is there but fails validation is a failure; a missing one a usage error.
    bool usage = opened.status().code() == ErrorCode::not_found;
    return fail("weights", opened.status(), usage ? kExitUsage : kExitFailed);
  }
  int code = tensor ? show_tensor(*opened, *tensor, index_texts, as_json) : list(*opened, path, as_json);
  // A file truncated while we read it could have ended us with SIGBUS; one
  // that changed otherwise makes what we printed suspect.
  for (const auto* file : opened->files()) {
    if (auto status = file->still_intact(); !status) return fail("weights", status, kExitFailed);
  }
  return code;
}

}  // namespace gpubox::host::cli
