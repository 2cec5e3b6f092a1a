// Over 600 lines: the Python str methods and Jinja filters chat templates call, one table of small functions that share the argument helpers at its top.
#include "model/chat/builtins.h"

#include <fmt/format.h>
#include <utf8proc.h>

#include <algorithm>
#include <cmath>
#include <ctime>

namespace gpubox::chat {
namespace {

[[noreturn]] void fail(const std::string& problem) { throw TemplateError(problem); }


// UTF-8 code points of s as [begin, end) byte ranges; invalid bytes count one each.
std::vector<std::pair<std::size_t, std::size_t>> split_code_points(const std::string& s) {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  std::size_t k = 0;
  while (k < s.size()) {
    utf8proc_int32_t cp = 0;
    auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + k), static_cast<utf8proc_ssize_t>(s.size() - k), &cp);
    std::size_t len = n > 0 ? static_cast<std::size_t>(n) : 1;
    out.emplace_back(k, k + len);
    k += len;
  }
  return out;
}

std::int32_t decode_at(const std::string& s, std::size_t begin, std::size_t end) {
  utf8proc_int32_t cp = -1;
  utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + begin), static_cast<utf8proc_ssize_t>(end - begin), &cp);
  return cp;
}

// Python's str.isspace() for one code point.
bool py_space(std::int32_t cp) {
  if ((cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 || cp == 0x1680) return true;
  if ((cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000) return true;
  return false;
}

// Python's str.strip / lstrip / rstrip: whitespace, or any code point of chars.
std::string strip(const std::string& s, const Value* chars, bool left, bool right) {
  auto cps = split_code_points(s);
  std::vector<std::int32_t> set;
  bool whitespace = !chars || chars->is(Kind::none);
  if (!whitespace) {
    if (!chars->is(Kind::string)) fail(fmt::format("strip arg must be None or str, not '{}'", type_name(*chars)));
    for (auto [b, e] : split_code_points(chars->s)) set.push_back(decode_at(chars->s, b, e));
  }
  auto strippable = [&](std::size_t k) {
    std::int32_t cp = decode_at(s, cps[k].first, cps[k].second);
    return whitespace ? py_space(cp) : std::find(set.begin(), set.end(), cp) != set.end();
  };
  std::size_t first = 0, last = cps.size();
  while (left && first < last && strippable(first)) ++first;
  while (right && last > first && strippable(last - 1)) --last;
  if (first == last) return "";
  return s.substr(cps[first].first, cps[last - 1].second - cps[first].first);
}

std::string map_case(const std::string& s, bool upper) {
  std::string out;
  for (auto [b, e] : split_code_points(s)) {
    std::int32_t cp = decode_at(s, b, e);
    if (cp < 0) {
      out += s.substr(b, e - b);
      continue;
    }
    cp = upper ? utf8proc_toupper(cp) : utf8proc_tolower(cp);
    utf8proc_uint8_t buf[4];
    auto n = utf8proc_encode_char(cp, buf);
    out.append(reinterpret_cast<const char*>(buf), static_cast<std::size_t>(n));
  }
  return out;
}

std::string capitalize(const std::string& s) {
  auto cps = split_code_points(s);
  if (cps.empty()) return s;
  return map_case(s.substr(0, cps[0].second), true) + map_case(s.substr(cps[0].second), false);
}

std::string title(const std::string& s) {
  std::string out;
  bool start = true;
  for (auto [b, e] : split_code_points(s)) {
    std::string ch = s.substr(b, e - b);
    std::int32_t cp = decode_at(s, b, e);
    bool letter = cp >= 0 && utf8proc_category(cp) >= UTF8PROC_CATEGORY_LU && utf8proc_category(cp) <= UTF8PROC_CATEGORY_LO;
    out += letter ? map_case(ch, start) : ch;
    start = !letter;
  }
  return out;
}

std::vector<std::string> split(const std::string& s, const Value* sep, std::int64_t max_split) {
  std::vector<std::string> out;
  if (!sep || sep->is(Kind::none)) {  // runs of whitespace, no empty parts
    auto cps = split_code_points(s);
    std::size_t k = 0;
    while (k < cps.size()) {
      while (k < cps.size() && py_space(decode_at(s, cps[k].first, cps[k].second))) ++k;
      if (k == cps.size()) break;
      if (max_split >= 0 && static_cast<std::int64_t>(out.size()) == max_split) {
        std::string rest = s.substr(cps[k].first);
        out.push_back(strip(rest, nullptr, false, true));
        return out;
      }
      std::size_t b = k;
      while (k < cps.size() && !py_space(decode_at(s, cps[k].first, cps[k].second))) ++k;
      out.push_back(s.substr(cps[b].first, (k == cps.size() ? s.size() : cps[k].first) - cps[b].first));
    }
    return out;
  }
  if (!sep->is(Kind::string)) fail(fmt::format("must be str or None, not '{}'", type_name(*sep)));
  if (sep->s.empty()) fail("empty separator");
  std::size_t from = 0;
  while (true) {
    std::size_t at = s.find(sep->s, from);
    if (at == std::string::npos || (max_split >= 0 && static_cast<std::int64_t>(out.size()) == max_split)) break;
    out.push_back(s.substr(from, at - from));
    from = at + sep->s.size();
  }
  out.push_back(s.substr(from));
  return out;
}

std::string replace(Runtime& rt, const std::string& s, const std::string& from, const std::string& to, std::int64_t count) {
  std::string out;
  std::size_t pos = 0;
  std::int64_t done = 0;
  if (from.empty()) fail("replace: an empty string to replace is not supported");
  while (count < 0 || done < count) {
    std::size_t at = s.find(from, pos);
    if (at == std::string::npos) break;
    out.append(s, pos, at - pos);
    out += to;
    rt.check_size(out.size());
    pos = at + from.size();
    ++done;
  }
  out.append(s, pos);
  rt.check_size(out.size());
  return out;
}

const Value& need_string(const Value* v, const char* what) {
  if (!v || !v->is(Kind::string)) fail(fmt::format("{} expects a string{}", what, v ? ", not '" + type_name(*v) + "'" : ""));
  return *v;
}

std::int64_t need_int(const Value* v, const char* what) {
  if (!v || !(v->is(Kind::integer) || v->is(Kind::boolean))) fail(fmt::format("{} expects an integer{}", what, v ? ", not '" + type_name(*v) + "'" : ""));
  return as_int(*v);
}

bool flag(const Value* v, bool fallback) { return v ? truthy(*v) : fallback; }

// The prefixes or suffixes of startswith/endswith: a string or a list of them.
bool affix(const std::string& s, const Value* arg, bool start, const char* what) {
  if (!arg) fail(fmt::format("{} takes one argument", what));
  std::vector<Value> options = arg->is(Kind::list) ? arg->list->items : std::vector<Value>{*arg};
  for (const Value& option : options) {
    const std::string& a = need_string(&option, what).s;
    if (a.size() <= s.size() && (start ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0)) return true;
  }
  return false;
}

void json_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) out += fmt::format("\\u{:04x}", c);
        else out += static_cast<char>(c);
    }
  }
  out += '"';
}

void json_value(std::string& out, const Value& v, int indent, bool sort_keys, const std::string& item_sep,
                const std::string& key_sep, int level) {
  if (level > 64) fail("tojson: the value nests deeper than 64 levels (or contains itself)");
  auto newline = [&](int at) {
    if (indent >= 0) out += "\n" + std::string(static_cast<std::size_t>(indent * at), ' ');
  };
  switch (v.kind) {
    case Kind::none: out += "null"; return;
    case Kind::boolean: out += v.b ? "true" : "false"; return;
    case Kind::integer: out += std::to_string(v.i); return;
    case Kind::number:
      if (std::isnan(v.d)) out += "NaN";
      else if (std::isinf(v.d)) out += v.d > 0 ? "Infinity" : "-Infinity";
      else out += float_repr(v.d);
      return;
    case Kind::string: json_string(out, v.s); return;
    case Kind::list: {
      if (v.list->items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (std::size_t k = 0; k < v.list->items.size(); ++k) {
        if (k) out += item_sep;
        newline(level + 1);
        json_value(out, v.list->items[k], indent, sort_keys, item_sep, key_sep, level + 1);
      }
      newline(level);
      out += ']';
      return;
    }
    case Kind::dict: {
      if (v.dict->items.empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& item : v.dict->items) items.push_back(&item);
      if (sort_keys) std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      out += '{';
      for (std::size_t k = 0; k < items.size(); ++k) {
        if (k) out += item_sep;
        newline(level + 1);
        json_string(out, items[k]->first);
        out += key_sep;
        json_value(out, items[k]->second, indent, sort_keys, item_sep, key_sep, level + 1);
      }
      newline(level);
      out += '}';
      return;
    }
    case Kind::undefined: fail(fmt::format("tojson: {} is undefined", v.s.empty() ? "a value" : v.s));
    case Kind::callable: fail("tojson: a function is not JSON serializable");
  }
}

Value to_list(Runtime& rt, std::vector<Value> items) { return rt.arena.list(std::move(items)); }

std::vector<Value> sequence(Runtime& rt, const Value& v, const char* what) {
  if (v.is(Kind::list) || v.is(Kind::dict) || v.is(Kind::string) || v.is(Kind::undefined)) return iterate(rt, v);
  fail(fmt::format("{} expects a list, not '{}'", what, type_name(v)));
}

// The value at a dotted attribute path ("function.name"), as Jinja's attribute filters read it.
Value attribute_path(const Value& v, const std::string& path) {
  Value at = v;
  std::size_t from = 0;
  while (true) {
    std::size_t dot = path.find('.', from);
    std::string part = path.substr(from, dot == std::string::npos ? std::string::npos : dot - from);
    at = attribute(at, part);
    if (dot == std::string::npos) return at;
    from = dot + 1;
  }
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

Value select(Runtime& rt, const Value& subject, const Args& args, bool by_attribute, bool keep, const char* what) {
  std::vector<Value> out;
  std::size_t first = by_attribute ? 1 : 0;
  std::string attr;
  if (by_attribute) attr = need_string(args.get(0, "attribute"), what).s;
  std::string test = args.positional.size() > first ? need_string(&args.positional[first], what).s : "";
  Args test_args;
  for (std::size_t k = first + 1; k < args.positional.size(); ++k) test_args.positional.push_back(args.positional[k]);
  if (!test.empty() && !has_test(test)) fail(fmt::format("{}: unknown test \"{}\"", what, test));
  for (const Value& item : sequence(rt, subject, what)) {
    Value probe = by_attribute ? attribute_path(item, attr) : item;
    bool passed = test.empty() ? truthy(probe) : apply_test(rt, test, probe, test_args);
    if (passed == keep) out.push_back(item);
  }
  return to_list(rt, std::move(out));
}

}  // namespace

const Value* Args::get(std::size_t index, const char* name) const {
  if (index < positional.size()) return &positional[index];
  for (const auto& [key, value] : named) {
    if (key == name) return &value;
  }
  return nullptr;
}

void Runtime::check_size(std::size_t bytes) const {
  if (bytes > max_string_bytes) fail(fmt::format("a string would exceed {} bytes", max_string_bytes));
}

std::size_t code_points(const std::string& s) { return split_code_points(s).size(); }

std::string to_json(const Value& v, int indent, bool sort_keys, const std::string& item_sep, const std::string& key_sep) {
  std::string out;
  json_value(out, v, indent, sort_keys, item_sep, key_sep, 0);
  return out;
}

std::vector<Value> iterate(Runtime& rt, const Value& v) {
  switch (v.kind) {
    case Kind::undefined: return {};
    case Kind::list: return v.list->items;
    case Kind::dict: {
      std::vector<Value> keys;
      for (const auto& item : v.dict->items) keys.push_back(Value::string(item.first));
      return keys;
    }
    case Kind::string: {
      std::vector<Value> chars;
      for (auto [b, e] : split_code_points(v.s)) chars.push_back(Value::string(v.s.substr(b, e - b)));
      rt.arena.charge(chars.size());
      return chars;
    }
    default: fail(fmt::format("'{}' object is not iterable", type_name(v)));
  }
}

Value attribute(const Value& object, const std::string& name) {
  if (object.is(Kind::dict)) {
    if (const Value* found = object.dict->find(name)) return *found;
  }
  return Value::undefined(fmt::format("\"{}\" of this {}", name, type_name(object)));
}

Value subscript(Runtime& rt, const Value& object, const Value& key) {
  (void)rt;
  if (object.is(Kind::dict)) {
    if (key.is(Kind::string)) {
      if (const Value* found = object.dict->find(key.s)) return *found;
    }
    return Value::undefined(fmt::format("key {} of this dict", repr(key)));
  }
  if (object.is(Kind::list) || object.is(Kind::string)) {
    if (!(key.is(Kind::integer) || key.is(Kind::boolean))) {
      if (key.is(Kind::string)) return Value::undefined(fmt::format("\"{}\" of this {}", key.s, type_name(object)));
      fail(fmt::format("{} indices must be integers, not '{}'", type_name(object), type_name(key)));
    }
    std::int64_t index = as_int(key);
    if (object.is(Kind::list)) {
      auto n = static_cast<std::int64_t>(object.list->items.size());
      if (index < 0) index += n;
      if (index < 0 || index >= n) return Value::undefined(fmt::format("index {} of a list of {}", as_int(key), n));
      return object.list->items[static_cast<std::size_t>(index)];
    }
    auto cps = split_code_points(object.s);
    auto n = static_cast<std::int64_t>(cps.size());
    if (index < 0) index += n;
    if (index < 0 || index >= n) return Value::undefined(fmt::format("index {} of a string of {}", as_int(key), n));
    auto [b, e] = cps[static_cast<std::size_t>(index)];
    return Value::string(object.s.substr(b, e - b));
  }
  if (object.is(Kind::undefined)) fail(fmt::format("{} is undefined", object.s.empty() ? "a value" : object.s));
  fail(fmt::format("'{}' object is not subscriptable", type_name(object)));
}

Value slice(Runtime& rt, const Value& object, const Value* start, const Value* stop, const Value* step) {
  if (!object.is(Kind::list) && !object.is(Kind::string)) fail(fmt::format("'{}' object cannot be sliced", type_name(object)));
  auto bound = [](const Value* v, const char* what) -> std::optional<std::int64_t> {
    if (!v || v->is(Kind::none)) return std::nullopt;
    return need_int(v, what);
  };
  std::int64_t by = bound(step, "a slice step").value_or(1);
  if (by == 0) fail("slice step cannot be zero");
  std::vector<std::pair<std::size_t, std::size_t>> cps;
  if (object.is(Kind::string)) cps = split_code_points(object.s);
  auto n = static_cast<std::int64_t>(object.is(Kind::list) ? object.list->items.size() : cps.size());
  auto clamp = [&](std::optional<std::int64_t> v, std::int64_t fallback) {
    if (!v) return fallback;
    std::int64_t x = *v < 0 ? *v + n : *v;
    if (by > 0) return std::clamp<std::int64_t>(x, 0, n);
    return std::clamp<std::int64_t>(x, -1, n - 1);
  };
  std::int64_t from = clamp(bound(start, "a slice start"), by > 0 ? 0 : n - 1);
  std::int64_t to = clamp(bound(stop, "a slice stop"), by > 0 ? n : -1);
  std::vector<std::int64_t> picked;
  for (std::int64_t k = from; by > 0 ? k < to : k > to;) {
    picked.push_back(k);
    if (__builtin_add_overflow(k, by, &k)) break;
  }
  if (object.is(Kind::list)) {
    std::vector<Value> items;
    for (auto k : picked) items.push_back(object.list->items[static_cast<std::size_t>(k)]);
    return to_list(rt, std::move(items));
  }
  std::string out;
  for (auto k : picked) {
    auto [b, e] = cps[static_cast<std::size_t>(k)];
    out.append(object.s, b, e - b);
  }
  return Value::string(std::move(out));
}

bool has_test(const std::string& name) {
  static const char* const names[] = {"defined", "undefined", "none", "string", "number", "integer", "float",
                                      "mapping", "iterable", "sequence", "boolean", "true", "false", "callable",
                                      "odd", "even", "divisibleby", "eq", "equalto", "==", "ne", "!=", "lt", "<",
                                      "le", "<=", "gt", ">", "ge", ">=", "in", "sameas", "lower", "upper"};
  return std::any_of(std::begin(names), std::end(names), [&](const char* n) { return name == n; });
}

bool apply_test(Runtime& rt, const std::string& name, const Value& v, const Args& args) {
  (void)rt;
  if (!has_test(name)) fail(fmt::format("unknown test \"{}\"", name));
  const Value* arg = args.get(0, "value");
  auto need_arg = [&]() -> const Value& {
    if (!arg) fail(fmt::format("test \"{}\" needs an argument", name));
    return *arg;
  };
  if (name == "defined") return !v.is(Kind::undefined);
  if (name == "undefined") return v.is(Kind::undefined);
  if (name == "none") return v.is(Kind::none);
  if (name == "string") return v.is(Kind::string);
  if (name == "number") return is_number(v);
  if (name == "integer") return v.is(Kind::integer);
  if (name == "float") return v.is(Kind::number);
  if (name == "mapping") return v.is(Kind::dict) && !v.dict->is_namespace;
  if (name == "iterable") return v.is(Kind::list) || v.is(Kind::dict) || v.is(Kind::string) || v.is(Kind::undefined);
  if (name == "sequence") return v.is(Kind::list) || v.is(Kind::dict) || v.is(Kind::string) || v.is(Kind::undefined);
  if (name == "boolean") return v.is(Kind::boolean);
  if (name == "true") return v.is(Kind::boolean) && v.b;
  if (name == "false") return v.is(Kind::boolean) && !v.b;
  if (name == "callable") return v.is(Kind::callable);
  if (name == "odd" || name == "even") {
    std::int64_t x = need_int(&v, "test \"odd\"/\"even\"");
    return (x % 2 != 0) == (name == "odd");
  }
  if (name == "divisibleby") {
    std::int64_t d = need_int(&need_arg(), "test \"divisibleby\"");
    if (d == 0) fail("divisibleby 0");
    return need_int(&v, "test \"divisibleby\"") % d == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return equal(v, need_arg());
  if (name == "ne" || name == "!=") return !equal(v, need_arg());
  if (name == "sameas") {
    const Value& other = need_arg();
    if (v.kind != other.kind) return false;
    if (v.is(Kind::none) || v.is(Kind::undefined)) return true;
    if (v.is(Kind::boolean)) return v.b == other.b;
    if (v.is(Kind::list)) return v.list == other.list;
    if (v.is(Kind::dict)) return v.dict == other.dict;
    return equal(v, other);
  }
  if (name == "lower" || name == "upper") return v.is(Kind::string) && map_case(v.s, name == "upper") == v.s;
  if (name == "in") {
    const Value& in = need_arg();
    if (in.is(Kind::string)) return v.is(Kind::string) && in.s.find(v.s) != std::string::npos;
    if (in.is(Kind::dict)) return v.is(Kind::string) && in.dict->find(v.s);
    if (in.is(Kind::list)) return std::any_of(in.list->items.begin(), in.list->items.end(), [&](const Value& x) { return equal(v, x); });
    fail(fmt::format("test \"in\": '{}' is not a container", type_name(in)));
  }
  const Value& other = need_arg();
  int cmp = 0;
  if (is_number(v) && is_number(other)) {
    double x = v.is(Kind::number) ? v.d : static_cast<double>(as_int(v));
    double y = other.is(Kind::number) ? other.d : static_cast<double>(as_int(other));
    cmp = x < y ? -1 : (x > y ? 1 : 0);
  } else if (v.is(Kind::string) && other.is(Kind::string)) {
    cmp = v.s.compare(other.s);
  } else if (name == "lt" || name == "<" || name == "le" || name == "<=" || name == "gt" || name == ">" || name == "ge" || name == ">=") {
    fail(fmt::format("test \"{}\": cannot compare '{}' and '{}'", name, type_name(v), type_name(other)));
  }
  if (name == "lt" || name == "<") return cmp < 0;
  if (name == "le" || name == "<=") return cmp <= 0;
  if (name == "gt" || name == ">") return cmp > 0;
  if (name == "ge" || name == ">=") return cmp >= 0;
  fail(fmt::format("unknown test \"{}\"", name));
}

Value apply_filter(Runtime& rt, const std::string& name, const Value& v, const Args& args) {
  const Value* a0 = args.get(0, "");
  if (name == "trim") {
    return Value::string(strip(need_string(&v, "filter \"trim\"").s, args.get(0, "chars"), true, true));
  }
  if (name == "length" || name == "count") {
    if (v.is(Kind::string)) return Value::integer(static_cast<std::int64_t>(code_points(v.s)));
    if (v.is(Kind::list)) return Value::integer(static_cast<std::int64_t>(v.list->items.size()));
    if (v.is(Kind::dict)) return Value::integer(static_cast<std::int64_t>(v.dict->items.size()));
    if (v.is(Kind::undefined)) return Value::integer(0);
    fail(fmt::format("object of type '{}' has no len()", type_name(v)));
  }
  if (name == "tojson") {  // transformers' tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
    for (const auto& [key, value] : args.named) {
      if (key != "indent" && key != "ensure_ascii" && key != "sort_keys" && key != "separators") fail(fmt::format("tojson: unknown argument \"{}\"", key));
    }
    if (flag(args.get(0, "ensure_ascii"), false)) fail("tojson: ensure_ascii=true is not supported");
    const Value* indent = args.get(1, "indent");
    const Value* seps = args.get(2, "separators");
    bool sort_keys = flag(args.get(3, "sort_keys"), false);
    int width = -1;
    if (indent && !indent->is(Kind::none)) width = static_cast<int>(std::clamp<std::int64_t>(need_int(indent, "tojson's indent"), 0, 64));
    std::string item_sep = width >= 0 ? "," : ", ", key_sep = ": ";
    if (seps && !seps->is(Kind::none)) {
      if (!seps->is(Kind::list) || seps->list->items.size() != 2) fail("tojson: separators must be a pair of strings");
      item_sep = need_string(&seps->list->items[0], "tojson's separators").s;
      key_sep = need_string(&seps->list->items[1], "tojson's separators").s;
    }
    std::string out = to_json(v, width, sort_keys, item_sep, key_sep);
    rt.check_size(out.size());
    return Value::string(std::move(out));
  }
  if (name == "upper" || name == "lower") return Value::string(map_case(need_string(&v, "filter \"upper\"/\"lower\"").s, name == "upper"));
  if (name == "capitalize") return Value::string(capitalize(need_string(&v, "filter \"capitalize\"").s));
  if (name == "title") return Value::string(title(need_string(&v, "filter \"title\"").s));
  if (name == "default" || name == "d") {
    bool boolean = flag(args.get(1, "boolean"), false);
    bool missing = v.is(Kind::undefined) || (boolean && !truthy(v));
    if (!missing) return v;
    const Value* fallback = args.get(0, "default_value");
    return fallback ? *fallback : Value::string("");
  }
  if (name == "join") {
    const Value* sep = args.get(0, "d");
    const Value* attr = args.get(1, "attribute");
    std::string glue = sep ? need_string(sep, "filter \"join\"").s : "";
    std::string out;
    bool first = true;
    for (const Value& item : sequence(rt, v, "filter \"join\"")) {
      if (!first) out += glue;
      out += to_str(attr ? attribute_path(item, need_string(attr, "join's attribute").s) : item);
      rt.check_size(out.size());
      first = false;
    }
    return Value::string(std::move(out));
  }
  if (name == "first" || name == "last") {
    std::vector<Value> items = sequence(rt, v, "filter \"first\"/\"last\"");
    if (items.empty()) return Value::undefined("the first/last item of an empty sequence");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "string") return Value::string(to_str(v));
  if (name == "safe") return v;
  if (name == "escape" || name == "e") return Value::string(html_escape(to_str(v)));
  if (name == "items") {
    if (v.is(Kind::undefined)) return to_list(rt, {});
    if (!v.is(Kind::dict)) fail(fmt::format("filter \"items\" expects a dict, not '{}'", type_name(v)));
    std::vector<Value> pairs;
    for (const auto& [key, value] : v.dict->items) pairs.push_back(to_list(rt, {Value::string(key), value}));
    return to_list(rt, std::move(pairs));
  }
  if (name == "list") return to_list(rt, sequence(rt, v, "filter \"list\""));
  if (name == "reverse") {
    if (v.is(Kind::string)) {
      auto cps = split_code_points(v.s);
      std::string out;
      for (auto it = cps.rbegin(); it != cps.rend(); ++it) out.append(v.s, it->first, it->second - it->first);
      return Value::string(std::move(out));
    }
    std::vector<Value> items = sequence(rt, v, "filter \"reverse\"");
    std::reverse(items.begin(), items.end());
    return to_list(rt, std::move(items));
  }
  if (name == "unique") {
    std::vector<Value> out;
    for (const Value& item : sequence(rt, v, "filter \"unique\"")) {
      if (std::none_of(out.begin(), out.end(), [&](const Value& x) { return equal(x, item); })) out.push_back(item);
    }
    return to_list(rt, std::move(out));
  }
  if (name == "map") {
    const Value* attr = nullptr;
    for (const auto& [key, value] : args.named) {
      if (key == "attribute") attr = &value;
    }
    std::vector<Value> out;
    if (attr) {
      const Value* fallback = nullptr;
      for (const auto& [key, value] : args.named) {
        if (key == "default") fallback = &value;
      }
      for (const Value& item : sequence(rt, v, "filter \"map\"")) {
        Value got = attribute_path(item, need_string(attr, "map's attribute").s);
        out.push_back(got.is(Kind::undefined) && fallback ? *fallback : got);
      }
      return to_list(rt, std::move(out));
    }
    const std::string& filter = need_string(a0, "filter \"map\"").s;
    if (filter == "map") fail("filter \"map\" cannot map itself");
    Args rest;
    for (std::size_t k = 1; k < args.positional.size(); ++k) rest.positional.push_back(args.positional[k]);
    for (const Value& item : sequence(rt, v, "filter \"map\"")) out.push_back(apply_filter(rt, filter, item, rest));
    return to_list(rt, std::move(out));
  }
  if (name == "selectattr") return select(rt, v, args, true, true, "filter \"selectattr\"");
  if (name == "rejectattr") return select(rt, v, args, true, false, "filter \"rejectattr\"");
  if (name == "select") return select(rt, v, args, false, true, "filter \"select\"");
  if (name == "reject") return select(rt, v, args, false, false, "filter \"reject\"");
  if (name == "int") {
    if (v.is(Kind::integer) || v.is(Kind::boolean)) return Value::integer(as_int(v));
    if (v.is(Kind::number) && std::isfinite(v.d) && std::fabs(v.d) < 9.2e18) return Value::integer(static_cast<std::int64_t>(v.d));
    if (v.is(Kind::string)) {
      try {
        std::size_t used = 0;
        std::string t = strip(v.s, nullptr, true, true);
        long long x = std::stoll(t, &used);
        if (used == t.size()) return Value::integer(x);
      } catch (const std::exception&) {
      }
    }
    return a0 ? *a0 : Value::integer(0);
  }
  if (name == "float") {
    if (is_number(v)) return Value::number(v.is(Kind::number) ? v.d : static_cast<double>(as_int(v)));
    if (v.is(Kind::string)) {
      try {
        std::size_t used = 0;
        std::string t = strip(v.s, nullptr, true, true);
        double x = std::stod(t, &used);
        if (used == t.size()) return Value::number(x);
      } catch (const std::exception&) {
      }
    }
    return a0 ? *a0 : Value::number(0);
  }
  if (name == "abs") {
    if (v.is(Kind::number)) return Value::number(std::fabs(v.d));
    std::int64_t x = need_int(&v, "filter \"abs\"");
    if (x == INT64_MIN) fail("integer overflow in abs");
    return Value::integer(x < 0 ? -x : x);
  }
  if (name == "replace") {
    std::int64_t count = -1;
    if (const Value* c = args.get(2, "count"); c && !c->is(Kind::none)) count = need_int(c, "replace's count");
    return Value::string(replace(rt, to_str(v), need_string(args.get(0, "old"), "filter \"replace\"").s,
                                 need_string(args.get(1, "new"), "filter \"replace\"").s, count));
  }
  if (name == "indent") {
    const Value* width = args.get(0, "width");
    std::string pad = width && width->is(Kind::string) ? width->s : std::string(static_cast<std::size_t>(std::clamp<std::int64_t>(width ? need_int(width, "indent's width") : 4, 0, 256)), ' ');
    bool first = flag(args.get(1, "first"), false), blank = flag(args.get(2, "blank"), false);
    std::string s = to_str(v), out;
    std::vector<std::string> lines;
    std::size_t from = 0;
    while (true) {
      std::size_t nl = s.find('\n', from);
      lines.push_back(s.substr(from, nl == std::string::npos ? std::string::npos : nl - from));
      if (nl == std::string::npos) break;
      from = nl + 1;
    }
    for (std::size_t k = 0; k < lines.size(); ++k) {
      if (k) out += '\n';
      bool indent_line = (k > 0 || first) && (blank || !lines[k].empty());
      out += (indent_line ? pad : "") + lines[k];
      rt.check_size(out.size());
    }
    return Value::string(std::move(out));
  }
  fail(fmt::format("unknown filter \"{}\"", name));
}

Value call_method(Runtime& rt, const Value& receiver, const std::string& name, const Args& args) {
  const Value* a0 = args.get(0, "");
  if (receiver.is(Kind::string)) {
    const std::string& s = receiver.s;
    if (name == "strip") return Value::string(strip(s, a0, true, true));
    if (name == "lstrip") return Value::string(strip(s, a0, true, false));
    if (name == "rstrip") return Value::string(strip(s, a0, false, true));
    if (name == "startswith") return Value::boolean(affix(s, a0, true, "startswith"));
    if (name == "endswith") return Value::boolean(affix(s, a0, false, "endswith"));
    if (name == "upper" || name == "lower") return Value::string(map_case(s, name == "upper"));
    if (name == "capitalize") return Value::string(capitalize(s));
    if (name == "title") return Value::string(title(s));
    if (name == "split") {
      const Value* limit = args.get(1, "maxsplit");
      std::vector<Value> parts;
      for (auto& part : split(s, args.get(0, "sep"), limit ? need_int(limit, "split's maxsplit") : -1)) parts.push_back(Value::string(std::move(part)));
      return to_list(rt, std::move(parts));
    }
    if (name == "replace") {
      const Value* count = args.get(2, "count");
      return Value::string(replace(rt, s, need_string(a0, "replace").s, need_string(args.get(1, "new"), "replace").s,
                                   count ? need_int(count, "replace's count") : -1));
    }
    if (name == "find") {
      std::size_t at = s.find(need_string(a0, "find").s);
      if (at == std::string::npos) return Value::integer(-1);
      return Value::integer(static_cast<std::int64_t>(code_points(s.substr(0, at))));
    }
    if (name == "count") {
      const std::string& what = need_string(a0, "count").s;
      if (what.empty()) return Value::integer(static_cast<std::int64_t>(code_points(s) + 1));
      std::int64_t n = 0;
      for (std::size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + what.size())) ++n;
      return Value::integer(n);
    }
    if (name == "join") {
      std::string out;
      bool first = true;
      for (const Value& item : sequence(rt, a0 ? *a0 : Value::undefined(), "join")) {
        if (!first) out += s;
        out += need_string(&item, "join").s;
        rt.check_size(out.size());
        first = false;
      }
      return Value::string(std::move(out));
    }
    if (name == "isspace" || name == "isdigit" || name == "isalpha" || name == "isalnum") {
      auto cps = split_code_points(s);
      if (cps.empty()) return Value::boolean(false);
      for (auto [b, e] : cps) {
        std::int32_t cp = decode_at(s, b, e);
        auto cat = cp >= 0 ? utf8proc_category(cp) : UTF8PROC_CATEGORY_CN;
        bool alpha = cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
        bool digit = cat == UTF8PROC_CATEGORY_ND;
        bool ok = name == "isspace" ? py_space(cp) : name == "isdigit" ? digit : name == "isalpha" ? alpha : (alpha || digit);
        if (!ok) return Value::boolean(false);
      }
      return Value::boolean(true);
    }
  }
  if (receiver.is(Kind::dict) && !receiver.dict->is_namespace) {
    const Dict& d = *receiver.dict;
    if (name == "items" || name == "keys" || name == "values") {
      std::vector<Value> out;
      for (const auto& [key, value] : d.items) {
        if (name == "items") out.push_back(to_list(rt, {Value::string(key), value}));
        else out.push_back(name == "keys" ? Value::string(key) : value);
      }
      return to_list(rt, std::move(out));
    }
    if (name == "get") {
      const Value& key = a0 ? *a0 : Value::undefined();
      if (key.is(Kind::string)) {
        if (const Value* found = d.find(key.s)) return *found;
      }
      const Value* fallback = args.get(1, "default");
      return fallback ? *fallback : Value::none();
    }
  }
  if (receiver.is(Kind::list) && name == "index") {
    for (std::size_t k = 0; k < receiver.list->items.size(); ++k) {
      if (a0 && equal(receiver.list->items[k], *a0)) return Value::integer(static_cast<std::int64_t>(k));
    }
    fail("list.index: the value is not in the list");
  }
  if (receiver.is(Kind::list) && (name == "append" || name == "extend" || name == "pop" || name == "insert")) {
    fail(fmt::format("list.{}() is not allowed: lists are immutable in chat templates (as in transformers' sandbox)", name));
  }
  fail(fmt::format("'{}' object has no method \"{}\"", type_name(receiver), name));
}

bool is_global(const std::string& name) {
  return name == "raise_exception" || name == "namespace" || name == "range" || name == "dict" || name == "strftime_now";
}

Value call_global(Runtime& rt, const std::string& name, const Args& args) {
  if (name == "raise_exception") {
    const Value* message = args.get(0, "message");
    throw RaisedError(message ? to_str(*message) : "");
  }
  if (name == "namespace" || name == "dict") {
    Value d = rt.arena.dict(name == "namespace");
    if (!args.positional.empty()) {
      const Value& init = args.positional[0];
      if (args.positional.size() > 1 || !init.is(Kind::dict)) fail(fmt::format("{}() takes keyword arguments or one dict", name));
      for (const auto& [key, value] : init.dict->items) d.dict->set(key, value);
    }
    for (const auto& [key, value] : args.named) {
      if (name == "namespace" && !key.empty() && key[0] == '_') fail("namespace attributes may not start with \"_\"");
      rt.arena.charge(1);
      d.dict->set(key, value);
    }
    return d;
  }
  if (name == "range") {
    if (args.positional.empty() || args.positional.size() > 3 || !args.named.empty()) fail("range() takes 1 to 3 integers");
    std::int64_t from = 0, to = 0, by = 1;
    if (args.positional.size() == 1) {
      to = need_int(&args.positional[0], "range");
    } else {
      from = need_int(&args.positional[0], "range");
      to = need_int(&args.positional[1], "range");
      if (args.positional.size() == 3) by = need_int(&args.positional[2], "range");
    }
    if (by == 0) fail("range() step must not be zero");
    std::vector<Value> out;
    for (std::int64_t k = from; by > 0 ? k < to : k > to; k += by) {
      rt.arena.charge(1);
      out.push_back(Value::integer(k));
      if ((by > 0 && k > INT64_MAX - by) || (by < 0 && k < INT64_MIN - by)) break;
    }
    return to_list(rt, std::move(out));
  }
  if (name == "strftime_now") {
    const std::string& format = need_string(args.get(0, "format"), "strftime_now").s;
    if (format.size() > 256) fail("strftime_now: the format is longer than 256 bytes");
    std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char buf[1024];
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
    std::size_t n = std::strftime(buf, sizeof buf, format.c_str(), &local);  // the template's format: strftime only reads it
#pragma GCC diagnostic pop
    return Value::string(std::string(buf, n));
  }
  fail(fmt::format("unknown function \"{}\"", name));
}

}  // namespace gpubox::chat
