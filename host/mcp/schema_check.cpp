#include "host/mcp/schema_check.h"

#include <cmath>

namespace gpubox::mcp {
namespace {

using nlohmann::json;

constexpr int kMaxDepth = 64;  // schemas and values nest no deeper than this

std::string shown(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  return text.size() > 60 ? text.substr(0, 57) + "..." : text;
}

bool has_type(const json& value, const std::string& type) {
  if (type == "string") return value.is_string();
  if (type == "integer") {
    return value.is_number_integer() || (value.is_number_float() && std::isfinite(value.get<double>()) &&
                                         value.get<double>() == std::floor(value.get<double>()));
  }
  if (type == "number") return value.is_number();
  if (type == "boolean") return value.is_boolean();
  if (type == "object") return value.is_object();
  if (type == "array") return value.is_array();
  if (type == "null") return value.is_null();
  return true;  // a type this checker does not know is not held against the value
}

std::string check(const json& schema, const json& value, const std::string& where, int depth) {
  if (depth > kMaxDepth) return where + ": nested too deeply";
  if (!schema.is_object()) return "";
  if (auto type = schema.find("type"); type != schema.end()) {
    bool ok = false;
    std::string names;
    if (type->is_string()) {
      ok = has_type(value, type->get<std::string>());
      names = type->get<std::string>();
    } else if (type->is_array()) {
      for (const auto& one : *type) {
        if (!one.is_string()) continue;
        ok = ok || has_type(value, one.get<std::string>());
        names += (names.empty() ? "" : " or ") + one.get<std::string>();
      }
      if (names.empty()) ok = true;
    } else {
      ok = true;
    }
    if (!ok) return where + ": expected " + (names == "integer" ? "an " : "a ") + names + ", got " + shown(value);
  }
  if (auto options = schema.find("enum"); options != schema.end() && options->is_array()) {
    bool found = false;
    for (const auto& option : *options) found = found || option == value;
    if (!found) return where + ": expected one of " + shown(*options) + ", got " + shown(value);
  }
  if (auto constant = schema.find("const"); constant != schema.end() && *constant != value) {
    return where + ": expected " + shown(*constant) + ", got " + shown(value);
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    auto options = schema.find(key);
    if (options == schema.end() || !options->is_array() || options->empty()) continue;
    std::string first;
    bool matched = false;
    for (const auto& option : *options) {
      std::string problem = check(option, value, where, depth + 1);
      if (problem.empty()) {
        matched = true;
        break;
      }
      if (first.empty()) first = problem;
    }
    if (!matched) return first;
  }
  if (value.is_number()) {
    double number = value.get<double>();
    if (auto min = schema.find("minimum"); min != schema.end() && min->is_number() && number < min->get<double>()) {
      return where + ": must be at least " + shown(*min) + ", got " + shown(value);
    }
    if (auto max = schema.find("maximum"); max != schema.end() && max->is_number() && number > max->get<double>()) {
      return where + ": must be at most " + shown(*max) + ", got " + shown(value);
    }
  }
  if (value.is_string()) {
    auto min = schema.find("minLength");
    if (min != schema.end() && min->is_number_unsigned() && value.get_ref<const std::string&>().size() < min->get<std::size_t>()) {
      return where + ": must not be empty";
    }
  }
  if (value.is_object()) {
    const json* properties = nullptr;
    if (auto found = schema.find("properties"); found != schema.end() && found->is_object()) properties = &*found;
    if (auto required = schema.find("required"); required != schema.end() && required->is_array()) {
      for (const auto& name : *required) {
        if (name.is_string() && !value.contains(name.get<std::string>())) return where + "." + name.get<std::string>() + ": required";
      }
    }
    auto additional = schema.find("additionalProperties");
    for (const auto& [name, member] : value.items()) {
      if (properties && properties->contains(name)) {
        std::string problem = check((*properties)[name], member, where + "." + name, depth + 1);
        if (!problem.empty()) return problem;
      } else if (additional != schema.end()) {
        if (additional->is_boolean() && !additional->get<bool>()) {
          return where + "." + name + ": unknown argument" + (properties ? " (known: " + [&] {
            std::string names;
            for (const auto& [known, unused] : properties->items()) names += (names.empty() ? "" : ", ") + known;
            return names;
          }() + ")" : std::string());
        }
        if (additional->is_object()) {
          std::string problem = check(*additional, member, where + "." + name, depth + 1);
          if (!problem.empty()) return problem;
        }
      }
    }
  }
  if (value.is_array()) {
    if (auto items = schema.find("items"); items != schema.end() && items->is_object()) {
      for (std::size_t i = 0; i < value.size(); ++i) {
        std::string problem = check(*items, value[i], where + "[" + std::to_string(i) + "]", depth + 1);
        if (!problem.empty()) return problem;
      }
    }
  }
  return "";
}

}  // namespace

std::string check_arguments(const json& schema, const json& arguments) { return check(schema, arguments, "arguments", 0); }

}  // namespace gpubox::mcp
