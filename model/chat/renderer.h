// Renderer: runs a parsed template over its variables and returns the text.
// One Renderer per render call; not thread-safe, not reusable.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "model/chat/ast.h"
#include "model/chat/builtins.h"

namespace gpubox::chat {

struct RenderLimits {
  std::size_t max_output_bytes;
  std::size_t max_iterations;   // loop iterations of the whole render
  int max_call_depth;           // nested macro calls
  int max_eval_depth;           // the renderer's own recursion
  std::size_t max_items;        // list and dict elements the render may build
};

class Renderer {
 public:
  Renderer(const RenderLimits& limits, Arena& arena);
  void set_global(const std::string& name, Value value);
  // Throws TemplateError ("line L, column C: ...", or "raise_exception: msg").
  std::string render(const Body& body);

 private:
  enum class Flow { normal, break_, continue_ };
  Flow exec(const Body& body, std::string& out);
  Flow exec(const Node& node, std::string& out);
  void exec_for(const Node& node, std::string& out);
  void assign(const Node& node, const std::vector<std::string>& targets, const Value& value);
  Value eval(const Expr& e);
  Value eval_binary(const Expr& e);
  Value eval_call(const Expr& e);
  Value call_macro(const MacroNode& macro, const Args& args, const Where& where);
  Args eval_args(const Expr& e, std::size_t first);
  Value lookup(const std::string& name) const;
  void emit(std::string& out, const std::string& text);
  void enter(const Where& where);
  [[noreturn]] static void fail(const Where& where, const std::string& problem);

  RenderLimits limits_;
  Arena& arena_;
  Runtime rt_;
  std::vector<std::unordered_map<std::string, Value>> scopes_;  // [0] holds the globals
  std::size_t iterations_ = 0;
  int call_depth_ = 0;
  int eval_depth_ = 0;
};

}  // namespace gpubox::chat
