// NormalizedText: a piece of text being normalized and pre-tokenized, with
// each byte's range in the original input (Hugging Face's NormalizedString).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace gpubox::tokenizer {

using Span = std::pair<std::uint32_t, std::uint32_t>;

struct NormalizedText {
  std::string text;
  std::vector<Span> align;  // one per byte of text: its [begin, end) in the original input
  std::uint32_t original_begin = 0;  // where this piece starts in the original input

  // A piece [begin, end) of the valid UTF-8 `whole`, each byte aligned to its
  // character; `origin` (may be null) maps bytes of `whole` to the caller's input.
  static NormalizedText from_original(const std::string& whole, std::size_t begin, std::size_t end,
                                      const std::vector<Span>* origin);
  NormalizedText slice(std::size_t begin, std::size_t end) const;
  // The original range of the normalized bytes [begin, end).
  Span original_span(std::size_t begin, std::size_t end) const;

  // Replaces the byte ranges `matches` (sorted, disjoint) with `content`; the new
  // bytes align like the last byte each replaces.
  void replace(const std::vector<std::pair<std::size_t, std::size_t>>& matches, const std::string& content);
  // Puts `prefix` before the text, aligned like its first character; no-op when empty.
  void prepend(const std::string& prefix);
  void nfc();
  // Maps every character through `map`, each output byte aligned like the input character.
  template <typename F>
  void map_chars(F&& map);
};

template <typename F>
void NormalizedText::map_chars(F&& map) {
  std::string out;
  std::vector<Span> out_align;
  out.reserve(text.size() * 2);
  out_align.reserve(text.size() * 2);
  for (std::size_t i = 0; i < text.size();) {
    std::size_t n = 1;
    auto lead = static_cast<unsigned char>(text[i]);
    n = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
    std::size_t from = out.size();
    map(std::string_view(text).substr(i, n), out);
    out_align.insert(out_align.end(), out.size() - from, align[i]);
    i += n;
  }
  text = std::move(out);
  align = std::move(out_align);
}

}  // namespace gpubox::tokenizer
