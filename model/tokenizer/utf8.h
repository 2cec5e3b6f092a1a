// UTF-8 helpers of the tokenizer: decoding one code point, encoding, and the
// lossy repair Hugging Face applies (one U+FFFD per maximal invalid subpart).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gpubox::tokenizer {

// Length of the valid UTF-8 sequence at text[pos], or 0 if it is not one
// (truncated, overlong, surrogate, above U+10FFFF). REQUIRES: pos < text.size().
std::size_t utf8_valid_length(std::string_view text, std::size_t pos);
// The code point of the valid sequence at pos. REQUIRES: utf8_valid_length(text, pos) > 0.
char32_t utf8_decode(std::string_view text, std::size_t pos, std::size_t len);
// Length in bytes of the valid (already checked) sequence whose lead byte is `lead`.
inline std::size_t utf8_lead_length(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}
void utf8_append(std::string& out, char32_t cp);
// Decodes valid UTF-8 into code points with their byte offsets.
std::vector<char32_t> utf8_code_points(std::string_view valid);

// Replaces each maximal invalid subpart with U+FFFD (String::from_utf8_lossy).
// If `origin` is not null, it receives for each output byte the input range
// [first, second) it came from.
std::string utf8_lossy(std::string_view bytes,
                       std::vector<std::pair<std::uint32_t, std::uint32_t>>* origin = nullptr);
bool utf8_is_valid(std::string_view bytes);

}  // namespace gpubox::tokenizer
