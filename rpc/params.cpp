#include "rpc/params.h"

#include <cmath>
#include <sstream>

namespace gpubox::rpc {

using nlohmann::json;

nlohmann::json binary(std::string_view bytes) {
  return json::binary(json::binary_t::container_type(bytes.begin(), bytes.end()));
}

const json* ParamReader::find(const std::string& name, bool required) {
  known_.insert(name);
  if (!status_.is_ok()) return nullptr;
  auto it = params_.find(name);
  if (it == params_.end() || it->is_null()) {
    if (required) status_ = Status(ErrorCode::invalid_request, "params." + name + ": required");
    return nullptr;
  }
  return &*it;
}

namespace {

// got as the message shows it: JSON, except what JSON cannot write (bytes; NaN
// and the infinities, which dump() writes as null).
std::string shown_value(const json* got) {
  if (!got) return "nothing";
  if (got->is_binary()) return "bytes";
  if (got->is_number_float() && !std::isfinite(got->get<double>())) {
    double value = got->get<double>();
    return std::isnan(value) ? "nan" : value > 0 ? "inf" : "-inf";
  }
  return got->dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

void ParamReader::fail(const std::string& name, const std::string& expected, const json* got) {
  if (!status_.is_ok()) return;
  std::string shown = shown_value(got);
  if (shown.size() > 60) shown = shown.substr(0, 57) + "...";
  status_ = Status(ErrorCode::invalid_request, "params." + name + ": expected " + expected + ", got " + shown);
}

std::optional<std::string> ParamReader::string(const std::string& name, bool required) {
  const json* value = find(name, required);
  if (!value) return std::nullopt;
  if (!value->is_string()) {
    fail(name, "a string", value);
    return std::nullopt;
  }
  return value->get<std::string>();
}

std::optional<std::string> ParamReader::bytes(const std::string& name, bool required) {
  const json* value = find(name, required);
  if (!value) return std::nullopt;
  if (value->is_binary()) {
    const auto& data = value->get_binary();
    return std::string(data.begin(), data.end());
  }
  if (value->is_string()) return value->get<std::string>();
  fail(name, "bytes", value);
  return std::nullopt;
}

std::optional<bool> ParamReader::boolean(const std::string& name) {
  const json* value = find(name, false);
  if (!value) return std::nullopt;
  if (!value->is_boolean()) {
    fail(name, "true or false", value);
    return std::nullopt;
  }
  return value->get<bool>();
}

std::optional<std::int64_t> ParamReader::integer(const std::string& name, std::int64_t min, std::int64_t max,
                                                 bool required) {
  const json* value = find(name, required);
  if (!value) return std::nullopt;
  bool in_range = false;
  if (value->is_number_unsigned()) {
    auto v = value->get<std::uint64_t>();
    in_range = v <= static_cast<std::uint64_t>(max) && (min <= 0 || v >= static_cast<std::uint64_t>(min));
  } else if (value->is_number_integer()) {
    in_range = value->get<std::int64_t>() >= min && value->get<std::int64_t>() <= max;
  }
  if (!in_range) {
    fail(name, "an integer from " + std::to_string(min) + " to " + std::to_string(max), value);
    return std::nullopt;
  }
  return value->get<std::int64_t>();
}

namespace {

// A bound as people write it: 1073741824, not 1073741824.000000; 0.5 as 0.5.
std::string bound_text(double value) {
  if (value == std::floor(value) && std::fabs(value) < 1e15) return std::to_string(static_cast<long long>(value));
  std::ostringstream out;
  out << value;
  return out.str();
}

}  // namespace

std::optional<double> ParamReader::number(const std::string& name, double min, double max) {
  const json* value = find(name, false);
  if (!value) return std::nullopt;
  // Written so that NaN (which compares false with everything) is refused.
  if (!value->is_number() || !(value->get<double>() >= min && value->get<double>() <= max)) {
    fail(name, "a number from " + bound_text(min) + " to " + bound_text(max), value);
    return std::nullopt;
  }
  return value->get<double>();
}

std::optional<std::vector<std::string>> ParamReader::string_list(const std::string& name, bool required) {
  const json* value = find(name, required);
  if (!value) return std::nullopt;
  if (!value->is_array()) {
    fail(name, "an array of strings", value);
    return std::nullopt;
  }
  std::vector<std::string> list;
  for (std::size_t i = 0; i < value->size(); ++i) {
    const json& item = (*value)[i];
    if (!item.is_string() || item.get<std::string>().find('\0') != std::string::npos) {
      fail(name + "[" + std::to_string(i) + "]", "a string without NUL bytes", &item);
      return std::nullopt;
    }
    list.push_back(item.get<std::string>());
  }
  return list;
}

std::optional<std::map<std::string, std::string>> ParamReader::string_map(const std::string& name) {
  const json* value = find(name, false);
  if (!value) return std::nullopt;
  if (!value->is_object()) {
    fail(name, "a map of strings", value);
    return std::nullopt;
  }
  std::map<std::string, std::string> map;
  for (const auto& [key, item] : value->items()) {
    if (!item.is_string()) {
      fail(name + "." + key, "a string", &item);
      return std::nullopt;
    }
    map[key] = item.get<std::string>();
  }
  return map;
}

std::optional<std::string> ParamReader::path(const std::string& name, bool required) {
  auto text = string(name, required);
  if (!text) return std::nullopt;
  if (text->find('\0') != std::string::npos) {
    status_ = Status(ErrorCode::invalid_request, "params." + name + ": the path holds a NUL byte");
    return std::nullopt;
  }
  if (text->empty() || (*text)[0] != '/') {
    status_ = Status(ErrorCode::invalid_request, "params." + name + ": expected an absolute path, got \"" + *text + "\"");
    return std::nullopt;
  }
  return text;
}

const json* ParamReader::raw(const std::string& name) { return find(name, false); }

Status ParamReader::finish() {
  if (!status_.is_ok()) return status_;
  for (const auto& [key, value] : params_.items()) {
    if (!known_.count(key)) {
      status_ = Status(ErrorCode::invalid_request, "params." + key + ": unknown parameter");
      break;
    }
  }
  return status_;
}

}  // namespace gpubox::rpc
