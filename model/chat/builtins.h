// Builtins: the filters, tests, methods and global functions a chat template
// may call, and the operations on values (subscripts, slices, tojson) that
// follow Python's rules. Each throws TemplateError naming what is wrong.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "model/chat/value.h"

namespace gpubox::chat {

struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> named;
  // The argument at `index`, or the keyword argument `name`; null when neither was given.
  const Value* get(std::size_t index, const char* name) const;
};

// What builtins need from the render that calls them.
struct Runtime {
  Arena& arena;
  std::size_t max_string_bytes;
  // Throws when a string grows past max_string_bytes.
  void check_size(std::size_t bytes) const;
};

Value apply_filter(Runtime& rt, const std::string& name, const Value& subject, const Args& args);
bool apply_test(Runtime& rt, const std::string& name, const Value& subject, const Args& args);
bool has_test(const std::string& name);
Value call_method(Runtime& rt, const Value& receiver, const std::string& name, const Args& args);
Value call_global(Runtime& rt, const std::string& name, const Args& args);
bool is_global(const std::string& name);

// obj.name / obj[key] / obj[a:b:c] as Jinja resolves them: a missing key gives undefined.
Value attribute(const Value& object, const std::string& name);
Value subscript(Runtime& rt, const Value& object, const Value& key);
Value slice(Runtime& rt, const Value& object, const Value* start, const Value* stop, const Value* step);
// The items a for loop visits: a list's items, a dict's keys, a string's characters.
std::vector<Value> iterate(Runtime& rt, const Value& v);
// Python's json.dumps(v, ensure_ascii=False, ...), as transformers' tojson filter calls it.
std::string to_json(const Value& v, int indent, bool sort_keys, const std::string& item_sep, const std::string& key_sep);
// The number of code points of a UTF-8 string (Python's len).
std::size_t code_points(const std::string& s);

}  // namespace gpubox::chat
