// Lexer: a Jinja template's text split into tokens, with Hugging Face's
// environment settings applied (trim_blocks, lstrip_blocks, one trailing
// newline dropped, "{%-"/"-%}" whitespace control, comments removed).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace gpubox::chat {

enum class TokenKind { text, expr_begin, expr_end, stmt_begin, stmt_end, name, string, integer, number, op, eof };

struct Token {
  TokenKind kind;
  std::string value;  // the text, name, string (unescaped), number or operator
  int line = 1;
  int column = 1;
};

// Throws TemplateError ("line L, column C: ...") on an unterminated tag or string.
std::vector<Token> lex(std::string_view source);

}  // namespace gpubox::chat
