// The GPT-2 byte-to-character table: every byte as a printable code point, so
// that byte-level BPE vocabularies are plain strings.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace gpubox::tokenizer {

// The code point byte b stands for.
char32_t byte_to_char(unsigned char b);
// The UTF-8 of byte_to_char(b).
const std::string& byte_to_utf8(unsigned char b);
// The byte code point cp stands for, if it is one of the 256.
std::optional<unsigned char> char_to_byte(char32_t cp);

}  // namespace gpubox::tokenizer
