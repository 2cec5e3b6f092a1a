#include "model/chat/parser.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <initializer_list>

namespace gpubox::chat {
namespace {

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, int max_depth) : t_(tokens), max_depth_(max_depth) {}

  Body run() {
    std::string ended;
    Body body = parse_body({}, ended);
    return body;
  }

 private:
  const Token& peek(std::size_t ahead = 0) const { return t_[std::min(pos_ + ahead, t_.size() - 1)]; }
  const Token& next() {
    const Token& tok = peek();
    if (pos_ < t_.size() - 1) ++pos_;
    return tok;
  }
  static Where where(const Token& tok) { return {tok.line, tok.column}; }
  [[noreturn]] static void fail(const Token& tok, const std::string& problem) {
    throw TemplateError(fmt::format("line {}, column {}: {}", tok.line, tok.column, problem));
  }
  bool is_op(const char* op, std::size_t ahead = 0) const { return peek(ahead).kind == TokenKind::op && peek(ahead).value == op; }
  bool is_name(const char* name, std::size_t ahead = 0) const { return peek(ahead).kind == TokenKind::name && peek(ahead).value == name; }
  bool accept_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool accept_name(const char* name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }
  static std::string describe(const Token& tok) {
    switch (tok.kind) {
      case TokenKind::eof: return "the end of the template";
      case TokenKind::expr_end: return "\"}}\"";
      case TokenKind::stmt_end: return "\"%}\"";
      case TokenKind::string: return "a string";
      default: return "\"" + tok.value + "\"";
    }
  }
  void expect_op(const char* op) {
    if (!accept_op(op)) fail(peek(), fmt::format("expected \"{}\", found {}", op, describe(peek())));
  }
  std::string expect_identifier() {
    if (peek().kind != TokenKind::name) fail(peek(), fmt::format("expected a name, found {}", describe(peek())));
    return next().value;
  }
  void expect_stmt_end() {
    if (peek().kind != TokenKind::stmt_end) fail(peek(), fmt::format("expected \"%}}\", found {}", describe(peek())));
    next();
  }

  struct DepthGuard {
    explicit DepthGuard(Parser& parser) : p(parser) {
      if (++p.depth_ > p.max_depth_) fail(p.peek(), fmt::format("the template nests deeper than {} levels", p.max_depth_));
    }
    ~DepthGuard() { --p.depth_; }
    Parser& p;
  };

  // Statements until "{% <one of ends> ...": leaves the parser after that keyword.
  Body parse_body(std::initializer_list<const char*> ends, std::string& ended) {
    DepthGuard guard(*this);
    Body body;
    while (true) {
      const Token& tok = peek();
      if (tok.kind == TokenKind::eof) {
        if (ends.size() == 0) return body;
        fail(tok, fmt::format("missing \"{{% {} %}}\"", *(ends.end() - 1)));
      }
      if (tok.kind == TokenKind::text) {
        Node n{NodeKind::text, where(tok)};
        n.text = next().value;
        body.push_back(std::move(n));
      } else if (tok.kind == TokenKind::expr_begin) {
        next();
        Node n{NodeKind::output, where(tok)};
        n.expr = parse_expression();
        if (peek().kind != TokenKind::expr_end) fail(peek(), fmt::format("expected \"}}}}\", found {}", describe(peek())));
        next();
        body.push_back(std::move(n));
      } else if (tok.kind == TokenKind::stmt_begin) {
        next();
        const Token& kw = peek();
        if (kw.kind != TokenKind::name) fail(kw, fmt::format("expected a statement name, found {}", describe(kw)));
        for (const char* end : ends) {
          if (kw.value == end) {
            ended = next().value;
            return body;
          }
        }
        body.push_back(parse_statement());
      } else {
        fail(tok, fmt::format("unexpected {}", describe(tok)));
      }
    }
  }

  Node parse_statement() {
    const Token& kw = next();
    const std::string& k = kw.value;
    if (k == "if") return parse_if(kw);
    if (k == "for") return parse_for(kw);
    if (k == "set") return parse_set(kw);
    if (k == "macro") return parse_macro(kw);
    if (k == "break" || k == "continue") {
      if (loop_depth_ == 0) fail(kw, fmt::format("\"{}\" outside a for loop", k));
      expect_stmt_end();
      return Node{k == "break" ? NodeKind::break_ : NodeKind::continue_, where(kw)};
    }
    if (k == "generation") {  // transformers' AssistantTracker tag: renders its body
      expect_stmt_end();
      std::string ended;
      Node n{NodeKind::if_, where(kw)};
      n.expr = std::make_unique<Expr>(ExprKind::literal, where(kw));
      n.expr->literal = Value::boolean(true);
      n.body = parse_body({"endgeneration"}, ended);
      expect_stmt_end();
      return n;
    }
    static const char* const known[] = {"include", "import", "from", "extends", "block", "call", "filter", "with",
                                        "raw", "do", "autoescape", "trans"};
    for (const char* name : known) {
      if (k == name) fail(kw, fmt::format("\"{{% {} %}}\" is not supported in chat templates here", k));
    }
    fail(kw, fmt::format("unknown statement \"{}\"", k));
  }

  Node parse_if(const Token& kw) {
    Node n{NodeKind::if_, where(kw)};
    n.expr = parse_expression();
    expect_stmt_end();
    std::string ended;
    n.body = parse_body({"elif", "else", "endif"}, ended);
    if (ended == "elif") {
      n.else_body.push_back(parse_if(t_[pos_ - 1]));
      return n;  // the nested if consumed the endif
    }
    if (ended == "else") {
      expect_stmt_end();
      n.else_body = parse_body({"endif"}, ended);
    }
    expect_stmt_end();
    return n;
  }

  Node parse_for(const Token& kw) {
    Node n{NodeKind::for_, where(kw)};
    n.targets.push_back(expect_identifier());
    while (accept_op(",")) n.targets.push_back(expect_identifier());
    if (!accept_name("in")) fail(peek(), fmt::format("expected \"in\", found {}", describe(peek())));
    n.expr = parse_or_ternary(false);
    if (accept_name("if")) n.filter = parse_or_ternary(false);
    if (is_name("recursive")) fail(peek(), "recursive for loops are not supported");
    expect_stmt_end();
    ++loop_depth_;
    std::string ended;
    n.body = parse_body({"else", "endfor"}, ended);
    --loop_depth_;
    if (ended == "else") {
      expect_stmt_end();
      n.else_body = parse_body({"endfor"}, ended);
    }
    expect_stmt_end();
    return n;
  }

  Node parse_set(const Token& kw) {
    Node n{NodeKind::set, where(kw)};
    n.targets.push_back(expect_identifier());
    if (accept_op(".")) {
      n.attr = expect_identifier();
    } else {
      while (accept_op(",")) n.targets.push_back(expect_identifier());
    }
    if (peek().kind == TokenKind::stmt_end && n.attr.empty() && n.targets.size() == 1) {
      next();
      n.kind = NodeKind::set_block;
      std::string ended;
      n.body = parse_body({"endset"}, ended);
      expect_stmt_end();
      return n;
    }
    expect_op("=");
    n.expr = parse_tuple_or_expression();
    expect_stmt_end();
    return n;
  }

  Node parse_macro(const Token& kw) {
    Node n{NodeKind::macro, where(kw)};
    auto macro = std::make_shared<MacroNode>();
    macro->name = expect_identifier();
    expect_op("(");
    while (!accept_op(")")) {
      if (!macro->params.empty()) expect_op(",");
      if (accept_op(")")) break;
      macro->params.push_back(expect_identifier());
      macro->defaults.push_back(accept_op("=") ? parse_expression() : nullptr);
    }
    expect_stmt_end();
    std::string ended;
    int saved_loops = loop_depth_;
    loop_depth_ = 0;
    macro->body = parse_body({"endmacro"}, ended);
    loop_depth_ = saved_loops;
    if (peek().kind == TokenKind::name) next();  // {% endmacro name %}
    expect_stmt_end();
    n.targets.push_back(macro->name);
    n.macro = std::move(macro);
    return n;
  }

  ExprPtr make(ExprKind kind, const Token& at) { return std::make_unique<Expr>(kind, where(at)); }

  // "a, b" on the right of a set makes a list, as Python's tuple would.
  ExprPtr parse_tuple_or_expression() {
    const Token& start = peek();
    ExprPtr first = parse_expression();
    if (!is_op(",")) return first;
    ExprPtr list = make(ExprKind::list, start);
    list->args.push_back(std::move(first));
    while (accept_op(",")) list->args.push_back(parse_expression());
    return list;
  }

  ExprPtr parse_expression() { return parse_or_ternary(true); }

  ExprPtr parse_or_ternary(bool with_ternary) {
    DepthGuard guard(*this);
    const Token& start = peek();
    ExprPtr value = parse_or();
    while (with_ternary && is_name("if")) {
      next();
      ExprPtr e = make(ExprKind::ternary, start);
      e->args.push_back(std::move(value));
      e->args.push_back(parse_or());
      e->args.push_back(accept_name("else") ? parse_or_ternary(true) : nullptr);
      value = std::move(e);
    }
    return value;
  }

  ExprPtr binary(const Token& at, std::string op, ExprPtr left, ExprPtr right) {
    ExprPtr e = make(ExprKind::binary, at);
    e->name = std::move(op);
    e->args.push_back(std::move(left));
    e->args.push_back(std::move(right));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      const Token& op = next();
      left = binary(op, "or", std::move(left), parse_and());
    }
    return left;
  }
  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      const Token& op = next();
      left = binary(op, "and", std::move(left), parse_not());
    }
    return left;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      const Token& op = next();
      ExprPtr e = make(ExprKind::unary, op);
      e->name = "not";
      e->args.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    ExprPtr left = parse_concat();
    while (true) {
      const Token& op = peek();
      if (op.kind == TokenKind::op && (op.value == "==" || op.value == "!=" || op.value == "<" || op.value == "<=" ||
                                       op.value == ">" || op.value == ">=")) {
        next();
        left = binary(op, op.value, std::move(left), parse_concat());
      } else if (is_name("in")) {
        next();
        left = binary(op, "in", std::move(left), parse_concat());
      } else if (is_name("not") && is_name("in", 1)) {
        next();
        next();
        left = binary(op, "not in", std::move(left), parse_concat());
      } else {
        return left;
      }
    }
  }
  ExprPtr parse_concat() {
    ExprPtr left = parse_sum();
    while (is_op("~")) {
      const Token& op = next();
      left = binary(op, "~", std::move(left), parse_sum());
    }
    return left;
  }
  ExprPtr parse_sum() {
    ExprPtr left = parse_product();
    while (is_op("+") || is_op("-")) {
      const Token& op = next();
      left = binary(op, op.value, std::move(left), parse_product());
    }
    return left;
  }
  ExprPtr parse_product() {
    ExprPtr left = parse_power();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& op = next();
      left = binary(op, op.value, std::move(left), parse_power());
    }
    return left;
  }
  ExprPtr parse_power() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      const Token& op = next();
      left = binary(op, "**", std::move(left), parse_unary(true));
    }
    return left;
  }
  ExprPtr parse_unary(bool with_filters) {
    DepthGuard guard(*this);
    ExprPtr value;
    if (is_op("-") || is_op("+")) {
      const Token& op = next();
      value = make(ExprKind::unary, op);
      value->name = op.value;
      value->args.push_back(parse_unary(false));
    } else {
      value = parse_postfix(parse_primary());
    }
    return with_filters ? parse_filters(std::move(value)) : std::move(value);
  }

  ExprPtr parse_primary() {
    DepthGuard guard(*this);
    const Token& tok = next();
    switch (tok.kind) {
      case TokenKind::string: {
        ExprPtr e = make(ExprKind::literal, tok);
        e->literal = Value::string(tok.value);
        while (peek().kind == TokenKind::string) e->literal.s += next().value;  // "a" "b" is "ab"
        return e;
      }
      case TokenKind::integer: {
        ExprPtr e = make(ExprKind::literal, tok);
        std::int64_t v = 0;
        auto [end, ec] = std::from_chars(tok.value.data(), tok.value.data() + tok.value.size(), v);
        if (ec != std::errc()) fail(tok, "integer literal out of range");
        e->literal = Value::integer(v);
        return e;
      }
      case TokenKind::number: {
        ExprPtr e = make(ExprKind::literal, tok);
        e->literal = Value::number(std::strtod(tok.value.c_str(), nullptr));
        return e;
      }
      case TokenKind::name: {
        ExprPtr e = make(ExprKind::literal, tok);
        const std::string& n = tok.value;
        if (n == "true" || n == "True") e->literal = Value::boolean(true);
        else if (n == "false" || n == "False") e->literal = Value::boolean(false);
        else if (n == "none" || n == "None") e->literal = Value::none();
        else {
          e->kind = ExprKind::name;
          e->name = n;
        }
        return e;
      }
      case TokenKind::op: {
        if (tok.value == "(") {
          if (accept_op(")")) return make(ExprKind::list, tok);  // () is an empty tuple
          ExprPtr first = parse_expression();
          if (accept_op(")")) return first;
          ExprPtr list = make(ExprKind::list, tok);
          list->args.push_back(std::move(first));
          while (accept_op(",")) {
            if (is_op(")")) break;
            list->args.push_back(parse_expression());
          }
          expect_op(")");
          return list;
        }
        if (tok.value == "[") {
          ExprPtr list = make(ExprKind::list, tok);
          while (!accept_op("]")) {
            if (!list->args.empty()) {
              expect_op(",");
              if (accept_op("]")) break;
            }
            list->args.push_back(parse_expression());
          }
          return list;
        }
        if (tok.value == "{") {
          ExprPtr dict = make(ExprKind::dict, tok);
          while (!accept_op("}")) {
            if (!dict->args.empty()) {
              expect_op(",");
              if (accept_op("}")) break;
            }
            dict->args.push_back(parse_expression());
            expect_op(":");
            dict->args.push_back(parse_expression());
          }
          return dict;
        }
        break;
      }
      default: break;
    }
    fail(tok, fmt::format("expected a value, found {}", describe(tok)));
  }

  ExprPtr parse_postfix(ExprPtr value) {
    while (true) {
      const Token& tok = peek();
      if (is_op(".")) {
        next();
        ExprPtr e = make(ExprKind::attr, tok);
        if (peek().kind == TokenKind::integer) {  // foo.0 is foo[0]
          e->kind = ExprKind::item;
          e->args.push_back(std::move(value));
          e->args.push_back(parse_primary());
        } else {
          e->name = expect_identifier();
          e->args.push_back(std::move(value));
        }
        value = std::move(e);
      } else if (is_op("[")) {
        next();
        value = parse_subscript(tok, std::move(value));
      } else if (is_op("(")) {
        next();
        ExprPtr e = make(ExprKind::call, tok);
        e->args.push_back(std::move(value));
        parse_arguments(*e);
        value = std::move(e);
      } else {
        return value;
      }
    }
  }

  ExprPtr parse_subscript(const Token& at, ExprPtr value) {
    ExprPtr bounds[3];
    int colons = 0;
    while (!is_op("]")) {
      if (accept_op(":")) {
        if (++colons > 2) fail(at, "a slice has at most two colons");
        continue;
      }
      if (bounds[colons]) fail(peek(), fmt::format("expected \"]\", found {}", describe(peek())));
      bounds[colons] = parse_expression();
    }
    next();
    if (colons == 0) {
      if (!bounds[0]) fail(at, "empty subscript");
      ExprPtr e = make(ExprKind::item, at);
      e->args.push_back(std::move(value));
      e->args.push_back(std::move(bounds[0]));
      return e;
    }
    ExprPtr e = make(ExprKind::slice, at);
    e->args.push_back(std::move(value));
    for (auto& b : bounds) e->args.push_back(std::move(b));
    return e;
  }

  // "(a, b, key=c)" after the "(": positional arguments go after args[0].
  void parse_arguments(Expr& e) {
    bool first = true;
    while (!accept_op(")")) {
      if (!first) {
        expect_op(",");
        if (accept_op(")")) break;
      }
      first = false;
      if (peek().kind == TokenKind::name && is_op("=", 1)) {
        std::string key = next().value;
        next();
        e.kwargs.emplace_back(key, parse_expression());
      } else {
        if (!e.kwargs.empty()) fail(peek(), "a positional argument after a keyword argument");
        e.args.push_back(parse_expression());
      }
    }
  }

  ExprPtr parse_filters(ExprPtr value) {
    while (true) {
      const Token& tok = peek();
      if (is_op("|")) {
        next();
        ExprPtr e = make(ExprKind::filter, tok);
        e->name = expect_identifier();
        e->args.push_back(std::move(value));
        if (accept_op("(")) parse_arguments(*e);
        value = std::move(e);
      } else if (is_name("is")) {
        next();
        ExprPtr e = make(ExprKind::test, tok);
        e->negated = accept_name("not");
        // Tests named like keywords.
        if (peek().kind == TokenKind::name) {
          e->name = next().value;
        } else if (is_op("==") || is_op("!=") || is_op("<") || is_op(">") || is_op("<=") || is_op(">=")) {
          e->name = next().value;
        } else {
          fail(peek(), fmt::format("expected a test name after \"is\", found {}", describe(peek())));
        }
        e->args.push_back(std::move(value));
        if (accept_op("(")) {
          parse_arguments(*e);
        } else if (starts_value(peek())) {
          e->args.push_back(parse_unary(false));  // "is divisibleby 3", "is sameas false"
        }
        value = std::move(e);
      } else {
        return value;
      }
    }
  }

  bool starts_value(const Token& tok) const {
    if (tok.kind == TokenKind::string || tok.kind == TokenKind::integer || tok.kind == TokenKind::number) return true;
    if (tok.kind == TokenKind::name) {
      static const char* const stops[] = {"and", "or", "if", "else", "is", "in", "not"};
      return std::none_of(std::begin(stops), std::end(stops), [&](const char* s) { return tok.value == s; });
    }
    return tok.kind == TokenKind::op && (tok.value == "[" || tok.value == "{");
  }

  const std::vector<Token>& t_;
  std::size_t pos_ = 0;
  int depth_ = 0;
  int max_depth_;
  int loop_depth_ = 0;
};

}  // namespace

Body parse(const std::vector<Token>& tokens, int max_depth) { return Parser(tokens, max_depth).run(); }

}  // namespace gpubox::chat
