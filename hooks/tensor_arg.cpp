#include "hooks/tensor_arg.h"

#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace gpubox::hooks {
namespace {

using nlohmann::json;

constexpr std::size_t kMaxDims = 8;

std::size_t element_bytes(WireDtype dtype) { return dtype == WireDtype::float32 ? 4 : 2; }

}  // namespace

const char* wire_dtype_name(WireDtype dtype) {
  switch (dtype) {
    case WireDtype::float16: return "float16";
    case WireDtype::bfloat16: return "bfloat16";
    default: return "float32";
  }
}

std::string shape_text(const std::vector<std::int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

std::optional<NonFinite> first_nonfinite(const TensorArg& arg, std::string_view bytes) {
  // The exponent bits of each format; all ones is an infinity (mantissa 0) or a NaN.
  std::size_t size = element_bytes(arg.dtype);
  std::uint32_t exponent = arg.dtype == WireDtype::float32 ? 0x7f800000u : arg.dtype == WireDtype::float16 ? 0x7c00u : 0x7f80u;
  std::uint32_t sign = size == 4 ? 0x80000000u : 0x8000u;
  for (std::size_t at = 0; at + size <= bytes.size(); at += size) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, bytes.data() + at, size);  // little-endian, as the wire is
    if ((bits & exponent) != exponent) continue;
    NonFinite found{{}, (bits & ~(sign | exponent)) != 0 ? "NaN" : (bits & sign) != 0 ? "-inf" : "+inf"};
    std::int64_t flat = static_cast<std::int64_t>(at / size);
    found.index.resize(arg.shape.size());
    for (std::size_t d = arg.shape.size(); d-- > 0;) {
      found.index[d] = arg.shape[d] == 0 ? 0 : flat % arg.shape[d];
      flat = arg.shape[d] == 0 ? 0 : flat / arg.shape[d];
    }
    return found;
  }
  return std::nullopt;
}

bool broadcasts_to(const std::vector<std::int64_t>& shape, const std::vector<std::int64_t>& target) {
  if (shape.size() > target.size()) return false;
  for (std::size_t i = 1; i <= shape.size(); ++i) {
    std::int64_t dim = shape[shape.size() - i];
    if (dim != 1 && dim != target[target.size() - i]) return false;
  }
  return true;
}

Result<TensorArg> decode_tensor_arg(const json& descriptor, const std::string& where,
                                    const std::vector<std::size_t>& attachment_bytes) {
  if (!descriptor.is_object()) {
    return Status::invalid_request(fmt::format("{}: expected a tensor {{\"dtype\", \"shape\", \"attachment\"}}", where));
  }
  for (const auto& [key, value] : descriptor.items()) {
    if (key != "dtype" && key != "shape" && key != "attachment") {
      return Status::invalid_request(fmt::format("{}: unknown field \"{}\" (a tensor has dtype, shape, attachment)", where, key));
    }
  }
  TensorArg arg;
  auto dtype = descriptor.find("dtype");
  if (dtype == descriptor.end() || *dtype == "float32") {
    arg.dtype = WireDtype::float32;
  } else if (*dtype == "float16") {
    arg.dtype = WireDtype::float16;
  } else if (*dtype == "bfloat16") {
    arg.dtype = WireDtype::bfloat16;
  } else {
    return Status::invalid_request(fmt::format("{}.dtype: {} is not float32, float16 or bfloat16", where, dtype->dump()));
  }
  auto shape = descriptor.find("shape");
  if (shape == descriptor.end() || !shape->is_array() || shape->size() > kMaxDims) {
    return Status::invalid_request(fmt::format("{}.shape: expected a list of at most {} sizes", where, kMaxDims));
  }
  std::size_t elements = 1;
  for (const auto& dim : *shape) {
    if (!dim.is_number_unsigned() || dim.get<std::uint64_t>() > (1ULL << 40)) {
      return Status::invalid_request(fmt::format("{}.shape: {} is not a size", where, dim.dump()));
    }
    arg.shape.push_back(dim.get<std::int64_t>());
    elements *= dim.get<std::size_t>();
    if (elements > (1ULL << 40)) return Status::invalid_request(fmt::format("{}.shape: too many elements", where));
  }
  auto attachment = descriptor.find("attachment");
  if (attachment == descriptor.end() || !attachment->is_number_unsigned() ||
      attachment->get<std::uint64_t>() >= attachment_bytes.size()) {
    return Status::invalid_request(fmt::format("{}.attachment: expected the index of one of the request's {} attachments", where,
                               attachment_bytes.size()));
  }
  arg.attachment = attachment->get<std::size_t>();
  std::size_t want = elements * element_bytes(arg.dtype);
  if (attachment_bytes[arg.attachment] != want) {
    return Status::invalid_request(fmt::format("{}: attachment {} holds {} bytes; shape {} of {} needs {}", where, arg.attachment,
                               attachment_bytes[arg.attachment], shape_text(arg.shape), wire_dtype_name(arg.dtype), want));
  }
  return arg;
}

}  // namespace gpubox::hooks
