// Value: what a chat template computes with — Python's None, bool, int, float,
// str, list and dict as Jinja sees them, plus Undefined and callables. Lists and
// dicts live in an Arena owned by one render, so values copy cheaply and a
// template cannot leak memory through reference cycles (namespace attributes).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <deque>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace gpubox::chat {

struct MacroNode;
struct List;
struct Dict;

enum class Kind { undefined, none, boolean, integer, number, string, list, dict, callable };

struct Value {
  Kind kind = Kind::undefined;
  bool b = false;
  std::int64_t i = 0;
  double d = 0;
  std::string s;  // the string; for undefined, a hint naming what was missing; for callable, its name
  List* list = nullptr;
  Dict* dict = nullptr;
  const MacroNode* macro = nullptr;  // callable: a template macro, else a builtin named s

  static Value undefined(std::string hint = {}) { Value v; v.s = std::move(hint); return v; }
  static Value none() { Value v; v.kind = Kind::none; return v; }
  static Value boolean(bool x) { Value v; v.kind = Kind::boolean; v.b = x; return v; }
  static Value integer(std::int64_t x) { Value v; v.kind = Kind::integer; v.i = x; return v; }
  static Value number(double x) { Value v; v.kind = Kind::number; v.d = x; return v; }
  static Value string(std::string x) { Value v; v.kind = Kind::string; v.s = std::move(x); return v; }
  static Value builtin(std::string name) { Value v; v.kind = Kind::callable; v.s = std::move(name); return v; }
  bool is(Kind k) const { return kind == k; }
};

struct List {
  std::vector<Value> items;
};

// Insertion-ordered like Python's dict; a namespace() accepts attribute assignment.
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  bool is_namespace = false;
  const Value* find(const std::string& key) const;
  void set(const std::string& key, Value value);
};

// An error of the template or of its data; the renderer adds the line and column.
class TemplateError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A TemplateError that already names its line and column.
class LocatedError : public TemplateError {
 public:
  using TemplateError::TemplateError;
};

// raise_exception(message) called by the template itself.
class RaisedError : public TemplateError {
 public:
  using TemplateError::TemplateError;
};

// Owns every list and dict of one render and bounds how many there are.
class Arena {
 public:
  explicit Arena(std::size_t max_items) : max_items_(max_items) {}
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  Value list(std::vector<Value> items = {});
  Value dict(bool is_namespace = false);
  // Counts elements a container gains, so that no render grows without bound.
  void charge(std::size_t elements);
  Value from_json(const nlohmann::ordered_json& json, int depth = 0);

 private:
  std::deque<List> lists_;
  std::deque<Dict> dicts_;
  std::size_t items_ = 0;
  std::size_t max_items_;
};

// Python's numbers: int, float and bool (True is 1).
inline bool is_number(const Value& v) { return v.is(Kind::integer) || v.is(Kind::number) || v.is(Kind::boolean); }
// An int or bool as an integer.
inline std::int64_t as_int(const Value& v) { return v.is(Kind::boolean) ? v.b : v.i; }
// A number as a double.
inline double as_double(const Value& v) { return v.is(Kind::number) ? v.d : static_cast<double>(as_int(v)); }
// Python's truthiness.
bool truthy(const Value& v);
// Python's ==.
bool equal(const Value& a, const Value& b);
// The type name Python would report ("str", "int", "list", "dict", "NoneType", "undefined").
std::string type_name(const Value& v);
// str(v) as Jinja prints it (None → "None", lists and dicts as Python's repr); undefined prints "".
std::string to_str(const Value& v);
// repr(v) as Python writes it.
std::string repr(const Value& v);
// Python's repr of a float ("1.0", "1e+20", "0.30000000000000004").
std::string float_repr(double d);

}  // namespace gpubox::chat
