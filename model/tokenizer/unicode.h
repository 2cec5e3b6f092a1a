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
// A regex \w character as Hugging Face's single_word check sees it: Alphabetic,
// marks, Nd, connector punctuation, joiners (from general categories).
bool is_unicode_word_char(char32_t cp);

// One NFC output code point and its change in Hugging Face's alignment
// tracking: 0 replaces the next input character, -k also removes the k after
// it, +1 is inserted after the previous one.
struct TaggedCodePoint {
  char32_t cp;
  int change;
};
// Canonical decomposition, canonical ordering and canonical composition of `input`.
std::vector<TaggedCodePoint> nfc_tagged(const std::vector<char32_t>& input);

}  // namespace gpubox::tokenizer
