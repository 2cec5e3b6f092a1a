#include "model/chat/renderer.h"

#include <fmt/format.h>

#include <cmath>

namespace gpubox::chat {
namespace {


[[noreturn]] void bad_operands(const std::string& op, const Value& a, const Value& b) {
  if (a.is(Kind::undefined) || b.is(Kind::undefined)) {
    const Value& u = a.is(Kind::undefined) ? a : b;
    throw TemplateError(fmt::format("{} is undefined (in \"{}\")", u.s.empty() ? "a value" : u.s, op));
  }
  throw TemplateError(fmt::format("unsupported operand types for {}: '{}' and '{}'", op, type_name(a), type_name(b)));
}

bool checked(bool overflow, const std::string& op) {
  if (overflow) throw TemplateError(fmt::format("integer overflow in \"{}\"", op));
  return true;
}

}  // namespace

Renderer::Renderer(const RenderLimits& limits, Arena& arena)
    : limits_(limits), arena_(arena), rt_{arena, limits.max_output_bytes}, scopes_(1) {}

void Renderer::set_global(const std::string& name, Value value) { scopes_[0][name] = std::move(value); }

void Renderer::fail(const Where& where, const std::string& problem) {
  throw LocatedError(fmt::format("line {}, column {}: {}", where.line, where.column, problem));
}

void Renderer::enter(const Where& where) {
  if (eval_depth_ + 1 > limits_.max_eval_depth) fail(where, fmt::format("the render nests deeper than {} levels", limits_.max_eval_depth));
  ++eval_depth_;
}

// Counts one level of the renderer's recursion for as long as it lives.
struct DepthScope {
  explicit DepthScope(int& counter) : depth(counter) {}
  ~DepthScope() { --depth; }
  int& depth;
};

std::string Renderer::render(const Body& body) {
  std::string out;
  exec(body, out);
  return out;
}

void Renderer::emit(std::string& out, const std::string& text) {
  if (out.size() + text.size() > limits_.max_output_bytes) {
    throw TemplateError(fmt::format("the output would exceed {} bytes", limits_.max_output_bytes));
  }
  out += text;
}

Renderer::Flow Renderer::exec(const Body& body, std::string& out) {
  for (const Node& node : body) {
    Flow flow = exec(node, out);
    if (flow != Flow::normal) return flow;
  }
  return Flow::normal;
}

Renderer::Flow Renderer::exec(const Node& node, std::string& out) {
  enter(node.where);
  DepthScope scope(eval_depth_);
  try {
    switch (node.kind) {
      case NodeKind::text: emit(out, node.text); break;
      case NodeKind::output: emit(out, to_str(eval(*node.expr))); break;
      case NodeKind::if_: return exec(truthy(eval(*node.expr)) ? node.body : node.else_body, out);
      case NodeKind::for_: exec_for(node, out); break;
      case NodeKind::set: assign(node, node.targets, eval(*node.expr)); break;
      case NodeKind::set_block: {
        std::string captured;
        exec(node.body, captured);
        assign(node, node.targets, Value::string(std::move(captured)));
        break;
      }
      case NodeKind::macro: {
        Value callable = Value::builtin(node.macro->name);
        callable.macro = node.macro.get();
        scopes_.back()[node.macro->name] = callable;
        break;
      }
      case NodeKind::break_: return Flow::break_;
      case NodeKind::continue_: return Flow::continue_;
    }
  } catch (const LocatedError&) {
    throw;
  } catch (const RaisedError&) {
    throw;
  } catch (const TemplateError& e) {
    fail(node.where, e.what());
  }
  return Flow::normal;
}

void Renderer::assign(const Node& node, const std::vector<std::string>& targets, const Value& value) {
  if (!node.attr.empty()) {
    Value ns = lookup(targets[0]);
    if (!ns.is(Kind::dict) || !ns.dict->is_namespace) {
      fail(node.where, fmt::format("cannot set attribute \"{}\" of \"{}\": it is not a namespace()", node.attr, targets[0]));
    }
    if (node.attr[0] == '_') fail(node.where, "namespace attributes may not start with \"_\"");
    arena_.charge(1);
    ns.dict->set(node.attr, value);
    return;
  }
  if (targets.size() == 1) {
    scopes_.back()[targets[0]] = value;
    return;
  }
  std::vector<Value> items = iterate(rt_, value);
  if (items.size() != targets.size()) {
    fail(node.where, fmt::format("cannot unpack {} values into {} names", items.size(), targets.size()));
  }
  for (std::size_t k = 0; k < targets.size(); ++k) scopes_.back()[targets[k]] = items[k];
}

void Renderer::exec_for(const Node& node, std::string& out) {
  Value iterable = eval(*node.expr);
  if (iterable.is(Kind::none) || is_number(iterable) || iterable.is(Kind::callable)) {
    fail(node.where, fmt::format("'{}' object is not iterable", type_name(iterable)));
  }
  std::vector<Value> items = iterate(rt_, iterable);
  if (node.filter) {
    std::vector<Value> kept;
    for (const Value& item : items) {
      scopes_.emplace_back();
      assign(node, node.targets, item);
      bool keep = truthy(eval(*node.filter));
      scopes_.pop_back();
      if (keep) kept.push_back(item);
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    exec(node.else_body, out);
    return;
  }
  Value loop = arena_.dict();
  auto n = static_cast<std::int64_t>(items.size());
  for (std::int64_t k = 0; k < n; ++k) {
    if (++iterations_ > limits_.max_iterations) {
      fail(node.where, fmt::format("more than {} loop iterations", limits_.max_iterations));
    }
    Dict& d = *loop.dict;
    d.items.clear();
    d.set("index0", Value::integer(k));
    d.set("index", Value::integer(k + 1));
    d.set("revindex0", Value::integer(n - k - 1));
    d.set("revindex", Value::integer(n - k));
    d.set("first", Value::boolean(k == 0));
    d.set("last", Value::boolean(k == n - 1));
    d.set("length", Value::integer(n));
    d.set("previtem", k > 0 ? items[static_cast<std::size_t>(k - 1)] : Value::undefined("loop.previtem"));
    d.set("nextitem", k + 1 < n ? items[static_cast<std::size_t>(k + 1)] : Value::undefined("loop.nextitem"));
    scopes_.emplace_back();
    scopes_.back()["loop"] = loop;
    assign(node, node.targets, items[static_cast<std::size_t>(k)]);
    Flow flow = Flow::normal;
    try {
      flow = exec(node.body, out);
    } catch (...) {
      scopes_.pop_back();
      throw;
    }
    scopes_.pop_back();
    if (flow == Flow::break_) break;
  }
}

Value Renderer::lookup(const std::string& name) const {
  for (auto scope = scopes_.rbegin(); scope != scopes_.rend(); ++scope) {
    auto found = scope->find(name);
    if (found != scope->end()) return found->second;
  }
  if (is_global(name)) return Value::builtin(name);
  return Value::undefined("\"" + name + "\"");
}

Args Renderer::eval_args(const Expr& e, std::size_t first) {
  Args args;
  for (std::size_t k = first; k < e.args.size(); ++k) args.positional.push_back(eval(*e.args[k]));
  for (const auto& [key, value] : e.kwargs) args.named.emplace_back(key, eval(*value));
  return args;
}

Value Renderer::eval(const Expr& e) {
  enter(e.where);
  DepthScope scope(eval_depth_);
  try {
    switch (e.kind) {
      case ExprKind::literal: return e.literal;
      case ExprKind::name: return lookup(e.name);
      case ExprKind::list: {
        std::vector<Value> items;
        for (const auto& a : e.args) items.push_back(eval(*a));
        return arena_.list(std::move(items));
      }
      case ExprKind::dict: {
        Value d = arena_.dict();
        for (std::size_t k = 0; k + 1 < e.args.size(); k += 2) {
          Value key = eval(*e.args[k]);
          if (!key.is(Kind::string)) fail(e.args[k]->where, fmt::format("dict keys must be strings here, not '{}'", type_name(key)));
          arena_.charge(1);
          d.dict->set(key.s, eval(*e.args[k + 1]));
        }
        return d;
      }
      case ExprKind::attr: {
        Value object = eval(*e.args[0]);
        if (object.is(Kind::undefined)) fail(e.where, fmt::format("{} is undefined (reading .{})", object.s.empty() ? "a value" : object.s, e.name));
        return attribute(object, e.name);
      }
      case ExprKind::item: {
        Value object = eval(*e.args[0]);
        if (object.is(Kind::undefined)) fail(e.where, fmt::format("{} is undefined (reading [...])", object.s.empty() ? "a value" : object.s));
        return subscript(rt_, object, eval(*e.args[1]));
      }
      case ExprKind::slice: {
        Value object = eval(*e.args[0]);
        Value bounds[3];
        const Value* given[3] = {nullptr, nullptr, nullptr};
        for (int k = 0; k < 3; ++k) {
          if (e.args[static_cast<std::size_t>(k) + 1]) {
            bounds[k] = eval(*e.args[static_cast<std::size_t>(k) + 1]);
            given[k] = &bounds[k];
          }
        }
        return slice(rt_, object, given[0], given[1], given[2]);
      }
      case ExprKind::call: return eval_call(e);
      case ExprKind::filter: {
        Value subject = eval(*e.args[0]);
        return apply_filter(rt_, e.name, subject, eval_args(e, 1));
      }
      case ExprKind::test: {
        Value subject = eval(*e.args[0]);
        bool result = apply_test(rt_, e.name, subject, eval_args(e, 1));
        return Value::boolean(result != e.negated);
      }
      case ExprKind::unary: {
        Value v = eval(*e.args[0]);
        if (e.name == "not") return Value::boolean(!truthy(v));
        if (!is_number(v)) fail(e.where, fmt::format("bad operand type for unary {}: '{}'", e.name, type_name(v)));
        if (e.name == "+") return v.is(Kind::number) ? v : Value::integer(as_int(v));
        if (v.is(Kind::number)) return Value::number(-v.d);
        checked(as_int(v) == INT64_MIN, "-");
        return Value::integer(-as_int(v));
      }
      case ExprKind::binary: return eval_binary(e);
      case ExprKind::ternary: {
        if (truthy(eval(*e.args[1]))) return eval(*e.args[0]);
        return e.args[2] ? eval(*e.args[2]) : Value::undefined("the else branch");
      }
    }
  } catch (const LocatedError&) {
    throw;
  } catch (const RaisedError&) {
    throw;
  } catch (const TemplateError& err) {
    fail(e.where, err.what());
  }
  return Value::undefined();
}

Value Renderer::eval_binary(const Expr& e) {
  const std::string& op = e.name;
  if (op == "and") {
    Value left = eval(*e.args[0]);
    return truthy(left) ? eval(*e.args[1]) : left;
  }
  if (op == "or") {
    Value left = eval(*e.args[0]);
    return truthy(left) ? left : eval(*e.args[1]);
  }
  Value a = eval(*e.args[0]);
  Value b = eval(*e.args[1]);
  if (op == "==") return Value::boolean(equal(a, b));
  if (op == "!=") return Value::boolean(!equal(a, b));
  if (op == "in" || op == "not in") {
    bool found = false;
    if (b.is(Kind::string)) {
      if (!a.is(Kind::string)) throw TemplateError(fmt::format("'in <string>' requires a string on the left, not '{}'", type_name(a)));
      found = b.s.find(a.s) != std::string::npos;
    } else if (b.is(Kind::list)) {
      for (const Value& item : b.list->items) found = found || equal(a, item);
    } else if (b.is(Kind::dict)) {
      found = a.is(Kind::string) && b.dict->find(a.s) != nullptr;
    } else if (b.is(Kind::undefined)) {
      found = false;
    } else {
      throw TemplateError(fmt::format("argument of type '{}' is not iterable", type_name(b)));
    }
    return Value::boolean(op == "in" ? found : !found);
  }
  if (op == "~") {
    std::string joined = to_str(a) + to_str(b);
    rt_.check_size(joined.size());
    return Value::string(std::move(joined));
  }
  if (op == "<" || op == "<=" || op == ">" || op == ">=") {
    int cmp = 0;
    if (is_number(a) && is_number(b)) {
      double x = as_double(a), y = as_double(b);
      if (!a.is(Kind::number) && !b.is(Kind::number)) cmp = as_int(a) < as_int(b) ? -1 : (as_int(a) > as_int(b) ? 1 : 0);
      else cmp = x < y ? -1 : (x > y ? 1 : 0);
    } else if (a.is(Kind::string) && b.is(Kind::string)) {
      cmp = a.s.compare(b.s);
    } else {
      throw TemplateError(fmt::format("'{}' not supported between '{}' and '{}'", op, type_name(a), type_name(b)));
    }
    if (op == "<") return Value::boolean(cmp < 0);
    if (op == "<=") return Value::boolean(cmp <= 0);
    if (op == ">") return Value::boolean(cmp > 0);
    return Value::boolean(cmp >= 0);
  }
  if (op == "+") {
    if (a.is(Kind::string) && b.is(Kind::string)) {
      rt_.check_size(a.s.size() + b.s.size());
      return Value::string(a.s + b.s);
    }
    if (a.is(Kind::list) && b.is(Kind::list)) {
      std::vector<Value> items = a.list->items;
      items.insert(items.end(), b.list->items.begin(), b.list->items.end());
      return arena_.list(std::move(items));
    }
  }
  if (op == "*") {
    const Value* text = a.is(Kind::string) ? &a : (b.is(Kind::string) ? &b : nullptr);
    const Value* count = text == &a ? &b : &a;
    if (text && (count->is(Kind::integer) || count->is(Kind::boolean))) {
      std::int64_t times = std::max<std::int64_t>(0, as_int(*count));
      if (text->s.empty()) return Value::string("");
      if (!text->s.empty() && static_cast<std::uint64_t>(times) > rt_.max_string_bytes / text->s.size()) rt_.check_size(SIZE_MAX);
      std::string out;
      for (std::int64_t k = 0; k < times; ++k) out += text->s;
      return Value::string(std::move(out));
    }
  }
  if (!is_number(a) || !is_number(b)) bad_operands(op, a, b);
  bool floats = a.is(Kind::number) || b.is(Kind::number) || op == "/";
  if (op == "**" && !floats && as_int(b) < 0) floats = true;
  if (floats) {
    double x = as_double(a), y = as_double(b);
    if (op == "+") return Value::number(x + y);
    if (op == "-") return Value::number(x - y);
    if (op == "*") return Value::number(x * y);
    if (op == "**") return Value::number(std::pow(x, y));
    if (y == 0) throw TemplateError("division by zero");
    if (op == "/") return Value::number(x / y);
    if (op == "//") return Value::number(std::floor(x / y));
    double r = std::fmod(x, y);
    if (r != 0 && ((r < 0) != (y < 0))) r += y;
    return Value::number(r);
  }
  std::int64_t x = as_int(a), y = as_int(b), r = 0;
  if (op == "+") return checked(__builtin_add_overflow(x, y, &r), op), Value::integer(r);
  if (op == "-") return checked(__builtin_sub_overflow(x, y, &r), op), Value::integer(r);
  if (op == "*") return checked(__builtin_mul_overflow(x, y, &r), op), Value::integer(r);
  if (op == "**") {
    r = 1;
    for (std::int64_t k = 0; k < y; ++k) {
      checked(__builtin_mul_overflow(r, x, &r), op);
      if (r == 0 || r == 1) break;
      if (k > 64 && r == -1) {
        r = (y % 2) ? -1 : 1;
        break;
      }
    }
    return Value::integer(r);
  }
  if (y == 0) throw TemplateError("division by zero");
  checked(x == INT64_MIN && y == -1, op);
  std::int64_t q = x / y, m = x % y;
  if (m != 0 && ((m < 0) != (y < 0))) {
    q -= 1;
    m += y;
  }
  return Value::integer(op == "//" ? q : m);
}

Value Renderer::eval_call(const Expr& e) {
  const Expr& callee = *e.args[0];
  if (callee.kind == ExprKind::attr) {
    Value receiver = eval(*callee.args[0]);
    if (receiver.is(Kind::undefined)) fail(callee.where, fmt::format("{} is undefined (calling .{}())", receiver.s.empty() ? "a value" : receiver.s, callee.name));
    Value member = receiver.is(Kind::dict) ? attribute(receiver, callee.name) : Value::undefined();
    if (!member.is(Kind::callable)) return call_method(rt_, receiver, callee.name, eval_args(e, 1));
    if (member.macro) return call_macro(*member.macro, eval_args(e, 1), e.where);
    return call_global(rt_, member.s, eval_args(e, 1));
  }
  Value f = eval(callee);
  if (!f.is(Kind::callable)) {
    fail(e.where, f.is(Kind::undefined) ? fmt::format("{} is undefined (called as a function)", f.s.empty() ? "a value" : f.s)
                                        : fmt::format("'{}' object is not callable", type_name(f)));
  }
  if (f.macro) return call_macro(*f.macro, eval_args(e, 1), e.where);
  return call_global(rt_, f.s, eval_args(e, 1));
}

Value Renderer::call_macro(const MacroNode& macro, const Args& args, const Where& where) {
  if (++call_depth_ > limits_.max_call_depth) {
    fail(where, fmt::format("macro calls nest deeper than {}", limits_.max_call_depth));
  }
  if (args.positional.size() > macro.params.size()) {
    fail(where, fmt::format("macro \"{}\" takes {} arguments, {} given", macro.name, macro.params.size(), args.positional.size()));
  }
  std::unordered_map<std::string, Value> frame;
  for (std::size_t k = 0; k < macro.params.size(); ++k) {
    const Value* given = args.get(k, macro.params[k].c_str());
    if (given) frame[macro.params[k]] = *given;
    else if (macro.defaults[k]) frame[macro.params[k]] = eval(*macro.defaults[k]);
    else frame[macro.params[k]] = Value::undefined("\"" + macro.params[k] + "\"");
  }
  for (const auto& [key, value] : args.named) {
    if (std::find(macro.params.begin(), macro.params.end(), key) == macro.params.end()) {
      fail(where, fmt::format("macro \"{}\" has no argument \"{}\"", macro.name, key));
    }
  }
  // A macro sees the globals and its arguments, not its caller's locals.
  std::vector<std::unordered_map<std::string, Value>> saved;
  saved.swap(scopes_);
  scopes_.push_back(saved[0]);
  scopes_.push_back(std::move(frame));
  std::string out;
  try {
    exec(macro.body, out);
  } catch (...) {
    scopes_.swap(saved);
    --call_depth_;
    throw;
  }
  scopes_.swap(saved);
  --call_depth_;
  return Value::string(std::move(out));
}

}  // namespace gpubox::chat
