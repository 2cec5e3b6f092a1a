// The parsed form of a chat template: expressions and statements, each with
// the line and column it came from so that render errors can name it.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/chat/value.h"

namespace gpubox::chat {

struct Where {
  int line = 1;
  int column = 1;
};

enum class ExprKind { literal, name, list, dict, attr, item, slice, call, filter, test, unary, binary, ternary };

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  Expr(ExprKind k, Where w) : kind(k), where(w) {}
  ExprKind kind;
  Where where;
  Value literal;          // literal
  std::string name;       // name, attr, filter, test; the operator of unary and binary
  bool negated = false;   // test: "is not"
  std::vector<ExprPtr> args;  // operands; a null entry is an omitted slice bound or else-branch
  std::vector<std::pair<std::string, ExprPtr>> kwargs;  // call, filter
};

enum class NodeKind { text, output, if_, for_, set, set_block, macro, break_, continue_ };

struct Node;
using Body = std::vector<Node>;

struct Node {
  Node(NodeKind k, Where w) : kind(k), where(w) {}
  NodeKind kind;
  Where where;
  std::string text;                  // text
  ExprPtr expr;                      // output, if condition, for iterable, set value
  ExprPtr filter;                    // for ... if filter
  std::vector<std::string> targets;  // for / set names
  std::string attr;                  // set ns.attr
  Body body;
  Body else_body;                    // if: else (an elif is a nested if); for: else
  std::shared_ptr<MacroNode> macro;  // macro
};

struct MacroNode {
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // one per param, null when it has none
  Body body;
};

}  // namespace gpubox::chat
