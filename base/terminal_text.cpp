#include "base/terminal_text.h"

#include <cstdint>
#include <cstdio>

namespace gpubox {
namespace {

// Code points that act on a terminal or reorder the text around them.
bool acts_on_terminal(std::uint32_t code) {
  return (code >= 0x80 && code <= 0x9f) ||                  // C1 controls (CSI, OSC, ...)
         code == 0x061c || code == 0x200e || code == 0x200f ||  // ALM, LRM, RLM
         (code >= 0x202a && code <= 0x202e) ||              // LRE RLE PDF LRO RLO
         (code >= 0x2066 && code <= 0x2069) ||              // LRI RLI FSI PDI
         code == 0x2028 || code == 0x2029;                  // line and paragraph separators
}

// \xNN for a byte, \uNNNN for a code point.
void append_byte(std::string& out, unsigned byte) {
  char hex[8];
  std::snprintf(hex, sizeof hex, "\\x%02x", byte);
  out += hex;
}

void append_code_point(std::string& out, std::uint32_t code) {
  char hex[16];
  std::snprintf(hex, sizeof hex, "\\u%04x", static_cast<unsigned>(code));
  out += hex;
}

}  // namespace

std::string escape_for_terminal(std::string_view text, bool keep_newlines) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    auto byte = static_cast<unsigned char>(text[i]);
    if (byte == '\\') {
      out += "\\\\";
      ++i;
      continue;
    }
    if (byte == '\n' && keep_newlines) {
      out += '\n';
      ++i;
      continue;
    }
    if (byte < 0x20 || byte == 0x7f) {
      append_byte(out, byte);
      ++i;
      continue;
    }
    if (byte < 0x80) {
      out += static_cast<char>(byte);
      ++i;
      continue;
    }
    // UTF-8: the sequence's length and its code point; anything malformed goes out byte by byte as \xNN.
    std::size_t length = byte >= 0xf0 && byte < 0xf5 ? 4 : byte >= 0xe0 && byte < 0xf0 ? 3 : byte >= 0xc2 && byte < 0xe0 ? 2 : 0;
    std::uint32_t code = length == 2 ? byte & 0x1f : length == 3 ? byte & 0x0f : byte & 0x07;
    bool valid = length > 0 && i + length <= text.size();
    for (std::size_t k = 1; valid && k < length; ++k) {
      auto next = static_cast<unsigned char>(text[i + k]);
      valid = (next & 0xc0) == 0x80;
      code = (code << 6) | (next & 0x3f);
    }
    if (valid) {
      valid = !(length == 3 && (code < 0x800 || (code >= 0xd800 && code <= 0xdfff))) &&
              !(length == 4 && (code < 0x10000 || code > 0x10ffff));
    }
    if (!valid) {
      append_byte(out, byte);
      ++i;
      continue;
    }
    if (acts_on_terminal(code)) {
      append_code_point(out, code);
    } else {
      out.append(text.substr(i, length));
    }
    i += length;
  }
  return out;
}

}  // namespace gpubox
