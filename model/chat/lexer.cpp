#include "model/chat/lexer.h"

#include <fmt/format.h>

#include "model/chat/value.h"

namespace gpubox::chat {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Jinja reads "\r\n" and "\r" as "\n" and drops one trailing newline.
std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (std::size_t k = 0; k < source.size(); ++k) {
    if (source[k] == '\r') {
      out += '\n';
      if (k + 1 < source.size() && source[k + 1] == '\n') ++k;
    } else {
      out += source[k];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {}

  std::vector<Token> run() {
    bool strip_next = false;  // a "-%}" / "-}}" / "-#}" asked to strip the following whitespace
    bool trim_newline = false;  // trim_blocks: a "%}" or "#}" drops one following newline
    while (pos_ < src_.size()) {
      std::size_t start = pos_;
      std::size_t open = find_tag(pos_);
      std::string text = src_.substr(pos_, open - pos_);
      if (strip_next) {
        std::size_t k = 0;
        while (k < text.size() && is_space(text[k])) ++k;
        text.erase(0, k);
      } else if (trim_newline && !text.empty() && text[0] == '\n') {
        text.erase(0, 1);
      }
      strip_next = trim_newline = false;
      if (open < src_.size()) {
        char kind = src_[open + 1];
        char control = open + 2 < src_.size() ? src_[open + 2] : '\0';
        if (control == '-') {
          while (!text.empty() && is_space(text.back())) text.pop_back();
        } else if (kind != '{' && control != '+') {
          lstrip_block(text, start);
        }
      }
      advance_to(open);
      if (!text.empty()) tokens_.push_back({TokenKind::text, std::move(text), line_, col_});
      if (open >= src_.size()) break;
      pos_ = open;
      char kind = src_[pos_ + 1];
      int line = line_, col = col_;
      step(2);
      if (pos_ < src_.size() && (src_[pos_] == '-' || src_[pos_] == '+')) step(1);
      if (kind == '#') {
        std::size_t end = src_.find("#}", pos_);
        if (end == std::string::npos) fail(line, col, "unterminated comment (no \"#}\")");
        strip_next = end > pos_ && src_[end - 1] == '-';
        trim_newline = !strip_next && !(end > pos_ && src_[end - 1] == '+');
        advance_to(end + 2);
        continue;
      }
      tokens_.push_back({kind == '{' ? TokenKind::expr_begin : TokenKind::stmt_begin, "", line, col});
      char control = lex_tag(kind == '{' ? '}' : '%', line, col);
      strip_next = control == '-';
      trim_newline = kind == '%' && control == '\0';
    }
    tokens_.push_back({TokenKind::eof, "", line_, col_});
    return std::move(tokens_);
  }

 private:
  std::size_t find_tag(std::size_t from) const {
    for (std::size_t k = from; k + 1 < src_.size(); ++k) {
      if (src_[k] == '{' && (src_[k + 1] == '{' || src_[k + 1] == '%' || src_[k + 1] == '#')) return k;
    }
    return src_.size();
  }

  // lstrip_blocks: spaces and tabs between the start of a line and a block tag go.
  void lstrip_block(std::string& text, std::size_t text_start) const {
    std::size_t line_start = text.rfind('\n');
    line_start = line_start == std::string::npos ? 0 : line_start + 1;
    if (line_start == 0 && !(text_start == 0 || src_[text_start - 1] == '\n')) return;
    for (std::size_t k = line_start; k < text.size(); ++k) {
      if (text[k] != ' ' && text[k] != '\t') return;
    }
    text.resize(line_start);
  }

  void step(std::size_t n) {
    for (std::size_t k = 0; k < n && pos_ < src_.size(); ++k, ++pos_) {
      if (src_[pos_] == '\n') {
        ++line_;
        col_ = 1;
      } else {
        ++col_;
      }
    }
  }
  void advance_to(std::size_t target) { step(target - pos_); }

  [[noreturn]] void fail(int line, int col, const std::string& problem) const {
    throw TemplateError(fmt::format("line {}, column {}: {}", line, col, problem));
  }

  // Tokens up to the closing "}}" or "%}"; returns its whitespace control ('-', '+' or '\0').
  char lex_tag(char close, int tag_line, int tag_col) {
    std::string open;  // the brackets not yet closed: "}}" inside a dict literal does not end the tag
    while (true) {
      while (pos_ < src_.size() && is_space(src_[pos_])) step(1);
      if (pos_ >= src_.size()) {
        std::string tag = close == '}' ? "\"{{\"" : "\"{%\"";
        fail(tag_line, tag_col, !open.empty() ? "unterminated " + tag + " (a bracket is not closed)" : "unterminated " + tag);
      }
      char c = src_[pos_];
      auto at = [&](std::size_t k) { return pos_ + k < src_.size() ? src_[pos_ + k] : '\0'; };
      if (open.empty()) {
        if ((c == '-' || c == '+') && at(1) == close && at(2) == '}') {
          tokens_.push_back({close == '}' ? TokenKind::expr_end : TokenKind::stmt_end, "", line_, col_});
          step(3);
          return c;
        }
        if (c == close && at(1) == '}') {
          tokens_.push_back({close == '}' ? TokenKind::expr_end : TokenKind::stmt_end, "", line_, col_});
          step(2);
          return '\0';
        }
      }
      int line = line_, col = col_;
      if (name_start(c)) {
        std::size_t b = pos_;
        while (pos_ < src_.size() && name_char(src_[pos_])) step(1);
        tokens_.push_back({TokenKind::name, src_.substr(b, pos_ - b), line, col});
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        lex_number(line, col);
      } else if (c == '\'' || c == '"') {
        lex_string(c, line, col);
      } else {
        static const char* const two[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op(1, c);
        for (const char* t : two) {
          if (c == t[0] && at(1) == t[1]) op = t;
        }
        if (op.size() == 1 && std::string_view("+-*/%~<>=()[]{},.:|").find(c) == std::string_view::npos) {
          fail(line, col, fmt::format("unexpected character '{}' in a tag", c));
        }
        if (c == '(' || c == '[' || c == '{') open += c;
        char opener = c == ')' ? '(' : c == ']' ? '[' : c == '}' ? '{' : '\0';
        if (opener && !open.empty() && open.back() == opener) open.pop_back();
        step(op.size());
        tokens_.push_back({TokenKind::op, op, line, col});
      }
    }
  }

  void lex_number(int line, int col) {
    std::size_t b = pos_;
    bool is_float = false;
    auto digits = [&] { while (pos_ < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) step(1); };
    digits();
    if (pos_ + 1 < src_.size() && src_[pos_] == '.' && std::isdigit(static_cast<unsigned char>(src_[pos_ + 1]))) {
      is_float = true;
      step(1);
      digits();
    }
    if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      std::size_t save = pos_;
      int sl = line_, sc = col_;
      step(1);
      if (pos_ < src_.size() && (src_[pos_] == '+' || src_[pos_] == '-')) step(1);
      if (pos_ < src_.size() && std::isdigit(static_cast<unsigned char>(src_[pos_]))) {
        is_float = true;
        digits();
      } else {
        pos_ = save;
        line_ = sl;
        col_ = sc;
      }
    }
    std::string text;
    for (char ch : src_.substr(b, pos_ - b)) {
      if (ch != '_') text += ch;
    }
    tokens_.push_back({is_float ? TokenKind::number : TokenKind::integer, text, line, col});
  }

  void lex_string(char quote, int line, int col) {
    step(1);
    std::string out;
    while (true) {
      if (pos_ >= src_.size()) fail(line, col, "unterminated string");
      char c = src_[pos_];
      if (c == quote) {
        step(1);
        break;
      }
      if (c == '\\' && pos_ + 1 < src_.size()) {
        char e = src_[pos_ + 1];
        step(2);
        switch (e) {
          case 'n': out += '\n'; break;
          case 't': out += '\t'; break;
          case 'r': out += '\r'; break;
          case '\\': out += '\\'; break;
          case '\'': out += '\''; break;
          case '"': out += '"'; break;
          case '\n': break;
          default: out += '\\'; out += e;  // Python keeps unknown escapes as written
        }
        continue;
      }
      out += c;
      step(1);
    }
    tokens_.push_back({TokenKind::string, std::move(out), line, col});
  }

  std::string src_;
  std::size_t pos_ = 0;
  int line_ = 1;
  int col_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> lex(std::string_view source) { return Lexer(normalize_newlines(source)).run(); }

}  // namespace gpubox::chat
