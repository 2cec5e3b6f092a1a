// Parser: tokens → the statement tree of a template, limited to the Jinja
// subset docs/chat_templates.md lists; anything else is refused by name.
#pragma once

#include <vector>

#include "model/chat/ast.h"
#include "model/chat/lexer.h"

namespace gpubox::chat {

// Throws TemplateError ("line L, column C: ...") on a syntax error, an
// unsupported construct, or nesting deeper than max_depth.
Body parse(const std::vector<Token>& tokens, int max_depth);

}  // namespace gpubox::chat
