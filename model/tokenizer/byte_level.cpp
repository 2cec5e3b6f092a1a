#include "model/tokenizer/byte_level.h"

#include "model/tokenizer/utf8.h"

namespace gpubox::tokenizer {
namespace {

// Printable Latin-1 bytes stand for themselves; the others are numbered from U+0100 on.
struct Table {
  std::array<char32_t, 256> chars{};
  std::array<std::string, 256> utf8;
  std::array<int, 256 + 68> bytes;  // byte of each code point below U+0144; -1: none
  Table() {
    bytes.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      chars[static_cast<std::size_t>(b)] = printable ? static_cast<char32_t>(b) : next++;
      utf8_append(utf8[static_cast<std::size_t>(b)], chars[static_cast<std::size_t>(b)]);
      bytes[chars[static_cast<std::size_t>(b)]] = b;
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
  if (cp >= table().bytes.size() || table().bytes[cp] < 0) return std::nullopt;
  return static_cast<unsigned char>(table().bytes[cp]);
}

}  // namespace gpubox::tokenizer
