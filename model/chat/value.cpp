#include "model/chat/value.h"

#include <charconv>
#include <cmath>
#include <fmt/format.h>

namespace gpubox::chat {

const Value* Dict::find(const std::string& key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Dict::set(const std::string& key, Value value) {
  for (auto& [k, v] : items) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(key, std::move(value));
}

void Arena::charge(std::size_t elements) {
  items_ += elements;
  if (items_ > max_items_) throw TemplateError(fmt::format("the template built more than {} list and dict elements", max_items_));
}

Value Arena::list(std::vector<Value> items) {
  charge(items.size() + 1);
  lists_.push_back(List{std::move(items)});
  Value v;
  v.kind = Kind::list;
  v.list = &lists_.back();
  return v;
}

Value Arena::dict(bool is_namespace) {
  charge(1);
  dicts_.emplace_back();
  dicts_.back().is_namespace = is_namespace;
  Value v;
  v.kind = Kind::dict;
  v.dict = &dicts_.back();
  return v;
}

Value Arena::from_json(const nlohmann::ordered_json& json, int depth) {
  if (depth > 64) throw TemplateError("the template's data nests deeper than 64 levels");
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value::boolean(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value::integer(json.get<std::int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      auto u = json.get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(INT64_MAX)) return Value::number(static_cast<double>(u));
      return Value::integer(static_cast<std::int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value::number(json.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value::string(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      for (const auto& e : json) items.push_back(from_json(e, depth + 1));
      return list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Value d = dict();
      for (const auto& [k, e] : json.items()) {
        charge(1);
        d.dict->set(k, from_json(e, depth + 1));
      }
      return d;
    }
    default: throw TemplateError("the template's data holds a value JSON cannot carry");
  }
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Kind::undefined:
    case Kind::none: return false;
    case Kind::boolean: return v.b;
    case Kind::integer: return v.i != 0;
    case Kind::number: return v.d != 0;
    case Kind::string: return !v.s.empty();
    case Kind::list: return !v.list->items.empty();
    case Kind::dict: return !v.dict->items.empty();
    case Kind::callable: return true;
  }
  return false;
}

namespace {
bool numeric(const Value& v) { return v.is(Kind::boolean) || v.is(Kind::integer) || v.is(Kind::number); }
}  // namespace

namespace {
bool equal_at(const Value& a, const Value& b, int depth);
}  // namespace

bool equal(const Value& a, const Value& b) { return equal_at(a, b, 0); }

namespace {
bool equal_at(const Value& a, const Value& b, int depth) {
  if (depth > 64) throw TemplateError("a comparison nests deeper than 64 levels (or a value contains itself)");
  if (numeric(a) && numeric(b)) {
    if (!a.is(Kind::number) && !b.is(Kind::number)) return (a.is(Kind::boolean) ? a.b : a.i) == (b.is(Kind::boolean) ? b.b : b.i);
    return as_double(a) == as_double(b);
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::undefined:
    case Kind::none: return true;
    case Kind::string: return a.s == b.s;
    case Kind::list: {
      if (a.list->items.size() != b.list->items.size()) return false;
      for (std::size_t k = 0; k < a.list->items.size(); ++k) {
        if (!equal_at(a.list->items[k], b.list->items[k], depth + 1)) return false;
      }
      return true;
    }
    case Kind::dict: {
      if (a.dict == b.dict) return true;
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& [k, v] : a.dict->items) {
        const Value* other = b.dict->find(k);
        if (!other || !equal_at(v, *other, depth + 1)) return false;
      }
      return true;
    }
    case Kind::callable: return a.macro == b.macro && a.s == b.s;
    default: return false;
  }
}
}  // namespace

std::string type_name(const Value& v) {
  switch (v.kind) {
    case Kind::undefined: return "undefined";
    case Kind::none: return "NoneType";
    case Kind::boolean: return "bool";
    case Kind::integer: return "int";
    case Kind::number: return "float";
    case Kind::string: return "str";
    case Kind::list: return "list";
    case Kind::dict: return v.dict->is_namespace ? "Namespace" : "dict";
    case Kind::callable: return "function";
  }
  return "?";
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, end);  // d[.ddd]e±XX, the shortest digits that round-trip
  std::size_t e = sci.find('e');
  std::string mantissa = sci.substr(0, e);
  int exponent = std::stoi(sci.substr(e + 1));
  bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits += c;
  }
  std::string out;
  if (exponent < -4 || exponent >= 16) {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    out += fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent));
  } else if (exponent < 0) {
    out = "0." + std::string(static_cast<std::size_t>(-exponent - 1), '0') + digits;
  } else {
    auto point = static_cast<std::size_t>(exponent) + 1;
    if (digits.size() <= point) {
      out = digits + std::string(point - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, point) + "." + digits.substr(point);
    }
  }
  return negative ? "-" + out : out;
}

namespace {
std::string string_repr(const std::string& s) {
  char quote = (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == static_cast<unsigned char>(quote)) out += std::string("\\") + quote;
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
    else out += static_cast<char>(c);
  }
  return out + quote;
}

std::string container_repr(const Value& v, int depth) {
  if (depth > 32) throw TemplateError("a value nests deeper than 32 levels (or contains itself)");
  auto item = [depth](const Value& e) { return (e.is(Kind::list) || e.is(Kind::dict)) ? container_repr(e, depth + 1) : repr(e); };
  std::string out;
  if (v.is(Kind::list)) {
    out = "[";
    for (std::size_t k = 0; k < v.list->items.size(); ++k) out += (k ? ", " : "") + item(v.list->items[k]);
    return out + "]";
  }
  out = v.dict->is_namespace ? "<Namespace {" : "{";
  bool first = true;
  for (const auto& [k, e] : v.dict->items) {
    out += (first ? "" : ", ") + string_repr(k) + ": " + item(e);
    first = false;
  }
  return out + (v.dict->is_namespace ? "}>" : "}");
}
}  // namespace

std::string repr(const Value& v) {
  switch (v.kind) {
    case Kind::undefined: return "";
    case Kind::none: return "None";
    case Kind::boolean: return v.b ? "True" : "False";
    case Kind::integer: return std::to_string(v.i);
    case Kind::number: return float_repr(v.d);
    case Kind::string: return string_repr(v.s);
    case Kind::list:
    case Kind::dict: return container_repr(v, 0);
    case Kind::callable: return "<function " + v.s + ">";
  }
  return "";
}

std::string to_str(const Value& v) { return v.is(Kind::string) ? v.s : repr(v); }

}  // namespace gpubox::chat
