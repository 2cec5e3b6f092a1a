#include "model/tokenizer/byte_level.h"

#include "model/tokenizer/utf8.h"

namespace gpubox::tokenizer {
namespace {

// Printable Latin-1 bytes stand for themselves; the others are numbered from U+0100 on.
struct Table {
  std::array<char32_t, 256> chars{};
  std::array<std::string, 256> utf8;
  Table() {
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      chars[static_cast<std::size_t>(b)] = printable ? static_cast<char32_t>(b) : next++;
      utf8_append(utf8[static_cast<std::size_t>(b)], chars[static_cast<std::size_t>(b)]);
    }
  }
};

const Table& table() {
  static const Table t;
  return t;
}

}  // namespace

char32_t byte_to_char(unsigned char b) { return table().chars[b]; }
const std::string& byte_to_utf8(unsigned char b) { return table().utf8[b]; }

std::optional<unsigned char> char_to_byte(char32_t cp) {
  if (cp < 256) {
    auto b = static_cast<unsigned char>(cp);
    if (table().chars[b] == cp) return b;
    return std::nullopt;
  }
  if (cp >= 256 && cp < 256 + 68) {
    for (int b = 0; b < 256; ++b)
      if (table().chars[static_cast<std::size_t>(b)] == cp) return static_cast<unsigned char>(b);
  }
  return std::nullopt;
}

}  // namespace gpubox::tokenizer
