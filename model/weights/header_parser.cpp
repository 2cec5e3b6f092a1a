#include "model/weights/header_parser.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>
#include <string_view>
#include <tuple>

#include <nlohmann/json.hpp>

namespace gpubox::weights {
namespace {

using nlohmann::json;

constexpr std::uint64_t kLengthBytes = 8;
// Deeper JSON than this cannot be a valid header (top object, entry, shape array).
constexpr int kMaxDepth = 4;

Status refuse_header(const std::string& label, const std::string& what) {
  return Status(ErrorCode::invalid_request, label + ": " + what);
}

Status refuse_tensor(const std::string& label, const std::string& name, const std::string& what) {
  return refuse_header(label, "tensor '" + name + "': " + what);
}

std::string range_text(std::uint64_t begin, std::uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

// Keys seen per open JSON object: nlohmann keeps the last of duplicate keys
// silently, and a duplicate tensor name must be refused, not overwritten.
class DuplicateKeyCheck {
 public:
  bool operator()(int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        open_.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!open_.empty()) open_.pop_back();
        break;
      case json::parse_event_t::key:
        if (!open_.empty() && parsed.is_string() && !open_.back().insert(parsed.get<std::string>()).second &&
            error_.empty()) {
          error_ = depth <= 1 ? "tensor name '" + parsed.get<std::string>() + "' appears twice in the header"
                              : "key '" + parsed.get<std::string>() + "' appears twice in one entry of the header";
        }
        break;
      default:
        break;
    }
    if (depth > kMaxDepth && error_.empty()) error_ = "the header nests JSON deeper than a safetensors header does";
    return depth <= kMaxDepth;
  }
  const std::string& error() const { return error_; }

 private:
  std::vector<std::set<std::string>> open_;
  std::string error_;
};

std::optional<std::uint64_t> as_unsigned(const json& value) {
  if (!value.is_number_unsigned()) return std::nullopt;
  return value.get<std::uint64_t>();
}

std::string kind_of(const json& value) {
  if (value.is_number_integer() && !value.is_number_unsigned()) return "a negative number";
  if (value.is_number_float()) return "a non-integer number";
  std::string name = value.type_name();
  return (name == "array" || name == "object" ? "an " : "a ") + name;
}

Result<TensorEntry> parse_entry(const std::string& label, const std::string& name, const json& value,
                                std::uint64_t data_bytes) {
  if (!value.is_object()) return refuse_tensor(label, name, "its entry is " + kind_of(value) + ", not an object");
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!value.contains(key)) return refuse_tensor(label, name, std::string("its entry has no '") + key + "'");
  }
  for (const auto& item : value.items()) {
    if (item.key() != "dtype" && item.key() != "shape" && item.key() != "data_offsets") {
      return refuse_tensor(label, name, "unexpected key '" + item.key() + "' (an entry has only dtype, shape, data_offsets)");
    }
  }
  TensorEntry entry;
  entry.name = name;

  const json& dtype = value.at("dtype");
  if (!dtype.is_string()) return refuse_tensor(label, name, "dtype is " + kind_of(dtype) + ", not a string");
  auto known = dtype_from_name(dtype.get_ref<const std::string&>());
  if (!known) return refuse_tensor(label, name, "unknown dtype '" + dtype.get<std::string>() + "'");
  entry.dtype = *known;

  const json& shape = value.at("shape");
  if (!shape.is_array()) return refuse_tensor(label, name, "shape is " + kind_of(shape) + ", not an array");
  std::uint64_t count = 1;
  bool overflow = false;
  for (const json& dim : shape) {
    auto size = as_unsigned(dim);
    if (!size) return refuse_tensor(label, name, "shape holds " + kind_of(dim) + ", not a non-negative integer");
    if (*size > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      return refuse_tensor(label, name, "shape dimension " + std::to_string(*size) + " is too large");
    }
    entry.shape.push_back(static_cast<std::int64_t>(*size));
    // Refused once the running product overflows, even if a later dimension
    // is 0, as the library's checked_mul fold does.
    if (!overflow && __builtin_mul_overflow(count, *size, &count)) overflow = true;
  }
  std::uint64_t bytes = 0;
  if (overflow || __builtin_mul_overflow(count, dtype_size(entry.dtype), &bytes)) overflow = true;
  if (overflow) return refuse_tensor(label, name, "its element count times its dtype size overflows 64 bits");

  const json& offsets = value.at("data_offsets");
  if (!offsets.is_array() || offsets.size() != 2) {
    return refuse_tensor(label, name, "data_offsets is not an array of two integers [begin, end]");
  }
  auto begin = as_unsigned(offsets[0]);
  auto end = as_unsigned(offsets[1]);
  if (!begin || !end) return refuse_tensor(label, name, "data_offsets holds something other than non-negative integers");
  if (*begin > *end) {
    return refuse_tensor(label, name, "data_offsets begin " + std::to_string(*begin) + " is after its end " +
                                          std::to_string(*end));
  }
  if (*end > data_bytes) {
    return refuse_tensor(label, name, "data_offsets " + range_text(*begin, *end) + " run past the data section (" +
                                          std::to_string(data_bytes) + " bytes)");
  }
  entry.offset = *begin;
  entry.size = *end - *begin;
  if (bytes != entry.size) {
    return refuse_tensor(label, name, "its shape and dtype make " + std::to_string(bytes) +
                                          " bytes but data_offsets " + range_text(*begin, *end) + " hold " +
                                          std::to_string(entry.size));
  }
  return entry;
}

Status parse_metadata(const std::string& label, const json& value, std::map<std::string, std::string>* out) {
  if (value.is_null()) return Status::ok();  // the library reads it as an Option
  if (!value.is_object()) return refuse_header(label, "__metadata__ is " + kind_of(value) + ", not an object of strings");
  for (const auto& item : value.items()) {
    if (!item.value().is_string()) {
      return refuse_header(label, "__metadata__ '" + item.key() + "' is " + kind_of(item.value()) + ", not a string");
    }
    (*out)[item.key()] = item.value().get<std::string>();
  }
  return Status::ok();
}

// Tensors sorted by offset must tile the data section exactly: from 0, each
// beginning where the one before ended, the last ending at its end.
Status check_tiling(const std::string& label, const std::vector<TensorEntry>& tensors, std::uint64_t data_bytes) {
  std::uint64_t expected = 0;
  const TensorEntry* previous = nullptr;
  for (const auto& entry : tensors) {
    if (entry.offset < expected) {
      return refuse_tensor(label, entry.name, "data_offsets " + range_text(entry.offset, entry.offset + entry.size) +
                                                  " overlap tensor '" + previous->name + "' " +
                                                  range_text(previous->offset, previous->offset + previous->size));
    }
    if (entry.offset > expected) {
      return refuse_header(label, "bytes " + range_text(expected, entry.offset) +
                               " of the data section belong to no tensor (a hole before tensor '" + entry.name + "')");
    }
    expected = entry.offset + entry.size;
    previous = &entry;
  }
  if (expected != data_bytes) {
    return refuse_header(label, "bytes " + range_text(expected, data_bytes) +
                             " at the end of the data section belong to no tensor");
  }
  return Status::ok();
}

}  // namespace

Result<ParsedFile> parse_safetensors(std::span<const std::byte> whole, const OpenOptions& options,
                                     const std::string& label) {
  if (whole.size() < kLengthBytes) {
    return refuse_header(label, "the file is " + std::to_string(whole.size()) +
                             " bytes, too short for the 8-byte header length of a safetensors file");
  }
  std::uint64_t header_bytes = 0;
  for (std::size_t i = 0; i < kLengthBytes; ++i) {
    header_bytes |= static_cast<std::uint64_t>(whole[i]) << (8 * i);
  }
  if (header_bytes > options.max_header_bytes) {
    return refuse_header(label, "the header length " + std::to_string(header_bytes) + " is over the cap of " +
                             std::to_string(options.max_header_bytes) + " bytes (not a safetensors file?)");
  }
  if (header_bytes > whole.size() - kLengthBytes) {
    return refuse_header(label, "the header length " + std::to_string(header_bytes) + " runs past the end of the file (" +
                             std::to_string(whole.size()) + " bytes): truncated?");
  }
  std::string_view text(reinterpret_cast<const char*>(whole.data() + kLengthBytes), header_bytes);  // NOLINT

  // nlohmann takes a NUL byte for the end of input and would accept "{}\0junk";
  // JSON text cannot hold a raw NUL, and the library refuses it.
  if (auto nul = text.find('\0'); nul != std::string_view::npos) {
    return refuse_header(label, "the header is not valid JSON: a NUL byte at offset " + std::to_string(nul));
  }
  DuplicateKeyCheck duplicates;
  json header;
  try {
    header = json::parse(text.begin(), text.end(), std::ref(duplicates));
  } catch (const json::exception& e) {
    return refuse_header(label, std::string("the header is not valid JSON: ") + e.what());
  }
  if (!duplicates.error().empty()) return refuse_header(label, duplicates.error());
  if (!header.is_object()) return refuse_header(label, "the header is not a JSON object");

  ParsedFile parsed;
  parsed.data_start = kLengthBytes + header_bytes;
  parsed.data_bytes = whole.size() - parsed.data_start;
  for (const auto& item : header.items()) {
    if (item.key() == "__metadata__") {
      if (auto status = parse_metadata(label, item.value(), &parsed.metadata); !status) return status;
      continue;
    }
    auto entry = parse_entry(label, item.key(), item.value(), parsed.data_bytes);
    if (!entry) return entry.status();
    parsed.tensors.push_back(std::move(entry).value());
  }
  std::sort(parsed.tensors.begin(), parsed.tensors.end(), [](const TensorEntry& a, const TensorEntry& b) {
    return std::tie(a.offset, a.size, a.name) < std::tie(b.offset, b.size, b.name);
  });
  if (auto status = check_tiling(label, parsed.tensors, parsed.data_bytes); !status) return status;
  return parsed;
}

}  // namespace gpubox::weights
