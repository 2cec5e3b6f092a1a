#include "host/budget/prices.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

namespace gpubox::host::budget {
namespace {

std::string trim(const std::string& text) {
  auto begin = text.find_first_not_of(" \t\r");
  if (begin == std::string::npos) return "";
  auto end = text.find_last_not_of(" \t\r");
  return text.substr(begin, end - begin + 1);
}

std::string number_text(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.15g", value);
  return text;
}

// A number of the file: all of the text, decimal (digits, '.', an exponent: never hex, inf or
// nan, which strtod would also take), >= 0 and at most kMaxPrice; else why not.
Result<double> price_of(const std::string& text) {
  auto refused = [&](const std::string& why) { return Status(ErrorCode::invalid_request, why); };
  if (text.empty()) return refused("expected a number, got nothing");
  if (text.find_first_not_of("0123456789.eE+-") != std::string::npos) {
    return refused("expected a decimal number >= 0 (digits, '.', an exponent), got '" + text + "'");
  }
  if (text[0] == '-') return refused("expected a number >= 0, got '" + text + "'");
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size()) return refused("expected a decimal number >= 0, got '" + text + "'");
  if (!std::isfinite(value) || value > kMaxPrice) {
    return refused(text + " is above the bound of " + number_text(kMaxPrice) + " for any number of a prices file (docs/budget.md)");
  }
  return value;
}

// A number of the JSON form (a define line of the journal): what price_of takes.
bool valid_json_price(const nlohmann::json& value) {
  if (!value.is_number()) return false;
  double number = value.get<double>();
  return std::isfinite(number) && number >= 0 && number <= kMaxPrice;
}

bool valid_gpu_type(const std::string& type) {
  if (type.empty() || type.size() > 64) return false;
  for (char c : type) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

Status bad(const std::string& where, const std::string& why) { return Status(ErrorCode::invalid_request, where + ": " + why); }

}  // namespace

nlohmann::json Prices::to_json() const {
  nlohmann::json json = {{"gpu_hour", gpu_hour},           {"cpu_core_hour", cpu_core_hour}, {"memory_gib_hour", memory_gib_hour},
                         {"egress_gib", egress_gib},       {"create", create},               {"source", source}};
  if (default_cpu_cores) json["default_cpu_cores"] = *default_cpu_cores;
  if (default_memory_gib) json["default_memory_gib"] = *default_memory_gib;
  return json;
}

Result<Prices> Prices::from_json(const nlohmann::json& json) {
  if (!json.is_object()) return bad("prices", "expected an object");
  Prices prices;
  auto number = [&](const char* key, double* into) -> Status {
    if (!json.contains(key)) return Status::ok();
    const auto& value = json[key];
    if (!valid_json_price(value)) return bad(std::string("prices.") + key, "expected a number from 0 to " + number_text(kMaxPrice));
    *into = value.get<double>();
    return Status::ok();
  };
  for (const char* key : {"cpu_core_hour", "memory_gib_hour", "egress_gib", "create"}) {
    double* into = std::string(key) == "cpu_core_hour"     ? &prices.cpu_core_hour
                   : std::string(key) == "memory_gib_hour" ? &prices.memory_gib_hour
                   : std::string(key) == "egress_gib"      ? &prices.egress_gib
                                                           : &prices.create;
    if (Status read = number(key, into); !read) return read;
  }
  for (const char* key : {"default_cpu_cores", "default_memory_gib"}) {
    if (!json.contains(key)) continue;
    double value = 0;
    if (Status read = number(key, &value); !read) return read;
    (std::string(key) == "default_cpu_cores" ? prices.default_cpu_cores : prices.default_memory_gib) = value;
  }
  if (json.contains("gpu_hour")) {
    if (!json["gpu_hour"].is_object()) return bad("prices.gpu_hour", "expected an object");
    for (const auto& [type, value] : json["gpu_hour"].items()) {
      if (!valid_gpu_type(type) || !valid_json_price(value)) {
        return bad("prices.gpu_hour." + type, "expected a GPU type and a price from 0 to " + number_text(kMaxPrice));
      }
      prices.gpu_hour[type] = value.get<double>();
    }
  }
  if (json.contains("source") && json["source"].is_string()) prices.source = json["source"].get<std::string>();
  return prices;
}

Result<Prices> parse_prices(const std::string& text) {
  if (text.size() > kMaxPricesFileBytes) {
    return bad("prices file", "larger than " + std::to_string(kMaxPricesFileBytes) + " bytes: not a prices file");
  }
  // A NUL byte: not text (and a message quoting its line would be cut there by whatever prints it as a C string).
  if (auto nul = text.find('\0'); nul != std::string::npos) {
    std::size_t line_start = text.rfind('\n', nul) == std::string::npos ? 0 : text.rfind('\n', nul) + 1;
    auto line = std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(nul), '\n') + 1;
    return bad("line " + std::to_string(line), "a NUL byte at column " + std::to_string(nul - line_start + 1) +
                                                   ": a prices file is text, one KEY = NUMBER a line");
  }
  Prices prices;
  std::set<std::string> seen;
  std::size_t line_number = 0;
  for (std::size_t at = 0; at <= text.size();) {
    std::size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(at, end - at);
    at = end + 1;
    ++line_number;
    if (auto hash = line.find('#'); hash != std::string::npos) line = line.substr(0, hash);
    line = trim(line);
    if (line.empty()) {
      if (end == text.size()) break;
      continue;
    }
    std::string where = "line " + std::to_string(line_number);
    auto eq = line.find('=');
    if (eq == std::string::npos) return bad(where, "expected KEY = NUMBER, got '" + line + "'");
    std::string key = trim(line.substr(0, eq));
    std::string value_text = trim(line.substr(eq + 1));
    where += ", " + key;
    if (!seen.insert(key).second) return bad(where, "given twice");
    if (key == "source") {
      prices.source = value_text;
      continue;
    }
    auto value = price_of(value_text);
    if (!value) return bad(where, value.status().message());
    if (key.rfind("gpu_hour.", 0) == 0) {
      std::string type = key.substr(9);
      if (!valid_gpu_type(type)) return bad(where, "expected gpu_hour.TYPE with TYPE of A-Z a-z 0-9 - _ . (as Modal names it)");
      prices.gpu_hour[type] = *value;
    } else if (key == "cpu_core_hour") {
      prices.cpu_core_hour = *value;
    } else if (key == "memory_gib_hour") {
      prices.memory_gib_hour = *value;
    } else if (key == "egress_gib") {
      prices.egress_gib = *value;
    } else if (key == "create") {
      prices.create = *value;
    } else if (key == "default_cpu_cores") {
      prices.default_cpu_cores = *value;
    } else if (key == "default_memory_gib") {
      prices.default_memory_gib = *value;
    } else {
      return bad(where, "unknown key (gpu_hour.TYPE, cpu_core_hour, memory_gib_hour, egress_gib, create, "
                        "default_cpu_cores, default_memory_gib, source)");
    }
    if (end == text.size()) break;
  }
  return prices;
}

}  // namespace gpubox::host::budget
