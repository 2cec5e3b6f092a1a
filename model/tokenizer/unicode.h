// Unicode properties the tokenizer needs (White_Space, alphanumeric, NFC),
// with Rust's `char` semantics where Hugging Face relies on them.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace gpubox::tokenizer {

// Rust's char::is_whitespace: the Unicode White_Space property.
bool is_unicode_whitespace(char32_t cp);
// Rust's char::is_alphanumeric, approximated by the general categories L* and N*.
bool is_unicode_alphanumeric(char32_t cp);

// One NFC output code point and the index of the input code point it stems
// from (a composed character stems from its starter), as the alignment
// tracking of Hugging Face's NFC reports it.
struct TaggedCodePoint {
  char32_t cp;
  std::size_t source;
};
// Canonical decomposition, canonical ordering and canonical composition of `input`.
std::vector<TaggedCodePoint> nfc_tagged(const std::vector<char32_t>& input);

}  // namespace gpubox::tokenizer
